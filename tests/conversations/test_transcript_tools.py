"""A tool turn in exports and imports (issue 30, point 7): Markdown folds
each call with its arguments and result, and no tool text breaks out of its
fold; JSON carries OpenAI-style `tool_calls` and `tool` messages (and
kvchat's own record of each step in the tree), and both import back."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.conversations.tool_steps import ToolStep
from chat.conversations.transcript import ImportFormatError, parse_import, to_json, to_markdown
from tests.conversations.test_tool_steps_store import (
    ANSWER_STATS,
    REFUSED_CALL,
    STEPS,
    TIME_CALL,
)
from tests.conversations.test_transcript_thinking import HOSTILE, rendered

ANSWER = "It is 22:10 in Tokyo."


def conversation(steps: tuple[ToolStep, ...] = STEPS, answer: str = ANSWER) -> Conversation:
    return Conversation(
        title="Time",
        created=1_700_000_000.0,
        updated=1_700_000_100.0,
        model_path="/models/qwen.gguf",
        model_name="qwen",
        messages=[
            Message("user", "What time is it in Tokyo?", created=1_700_000_001.0),
            Message(
                "assistant",
                answer,
                created=1_700_000_002.0,
                stats=ANSWER_STATS,
                token_ids=[5, 6, 7] if answer else None,
                tool_steps=steps,
            ),
            Message("user", "Thanks!", created=1_700_000_003.0),
        ],
    )


# --- Markdown ----------------------------------------------------------------------------


def test_markdown_folds_each_call_before_the_answer() -> None:
    text = to_markdown(conversation())
    time_fold = "<details><summary>Tool call: time.get_current_time · ran · 0.04 s · 31 tokens"
    refused_fold = "<details><summary>Tool call: files.delete_file · refused</summary>"
    assert text.count(time_fold) == 1 and text.count(refused_fold) == 1
    assert text.index("## Assistant") < text.index("Let me look.") < text.index(time_fold)
    assert text.index(time_fold) < text.index(refused_fold) < text.index(ANSWER)
    assert '>   "timezone": "Asia/Tokyo"' in text
    html = rendered(text)
    inside = html.text(inside=True)
    assert "2026-12-02T22:10:00+09:00" in inside and "/home/user/notes.txt" in inside
    assert "The user wants the time in Tokyo." in inside  # the step's thinking, folded too
    outside = html.text(inside=False)
    assert ANSWER in outside and "Let me look." in outside and "Thanks!" in outside


@pytest.mark.parametrize("hostile", HOSTILE)
def test_no_tool_text_breaks_out_of_its_fold(hostile: str) -> None:
    call = replace(
        TIME_CALL,
        name=hostile,
        tool=hostile,
        server=f"srv{hostile}",
        arguments={"q": hostile},
        result=hostile,
    )
    text = to_markdown(conversation((ToolStep("", (call,)),)))
    html = rendered(text)
    outside = html.text(inside=False)
    assert ANSWER in outside and "Thanks!" in outside
    assert "Owned" not in outside
    assert html.depth == 0


def test_a_tool_result_with_escape_sequences_shows_them() -> None:
    call = replace(TIME_CALL, result="ok \x1b]52;c;aGk=\x07")
    text = to_markdown(conversation((ToolStep("", (call,)),)))
    assert "\x1b" not in text and "\x07" not in text
    assert "> ok ␛]52;c;aGk=␇" in text


# --- JSON --------------------------------------------------------------------------------


def test_json_carries_openai_style_tool_calls_and_tool_messages() -> None:
    data = json.loads(to_json(conversation(), {}))
    assert [m["role"] for m in data["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    first, result = data["messages"][1:3]
    assert first == {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "The user wants the time in Tokyo.",
        "tool_calls": [
            {
                "id": "a1B2c3D4e",
                "type": "function",
                "function": {"name": "get_current_time", "arguments": '{"timezone": "Asia/Tokyo"}'},
            }
        ],
    }
    assert result == {
        "role": "tool",
        "tool_call_id": "a1B2c3D4e",
        "name": "get_current_time",
        "content": TIME_CALL.result,
    }
    assert data["messages"][5] == {"role": "assistant", "content": ANSWER}
    tree = data["kvchat"]["tree"]
    assert len(tree) == 3  # still one reply
    steps = tree[1]["tool_steps"]
    assert steps[0]["calls"][0]["server"] == "time"
    assert steps[1]["calls"][0]["outcome"] == "refused"


def test_json_round_trip_is_exact(tmp_path: Path) -> None:
    conv = conversation()
    text = to_json(conv, {"temperature": 0.0})
    imported, sampling = parse_import(text)
    assert [m.tool_steps for m in imported.messages] == [(), STEPS, ()]
    assert to_json(imported, sampling) == text
    with Store(tmp_path / "c.db") as store:
        conv_id = store.import_conversation(imported, sampling)
        assert to_json(store.get_conversation(conv_id), sampling) == text


def test_openai_style_messages_import_as_one_reply_with_its_steps() -> None:
    """The top-level messages alone (what another tool writes): the calls,
    their results and the answer become one reply again; what only kvchat
    knew (the server, the times) is not there."""
    messages = json.loads(to_json(conversation(), {}))["messages"]
    imported, _ = parse_import(json.dumps(messages))
    question, reply, thanks = imported.messages
    assert (question.content, reply.content, thanks.content) == (
        "What time is it in Tokyo?",
        ANSWER,
        "Thanks!",
    )
    assert [(s.content, s.thinking) for s in reply.tool_steps] == [
        (s.content, s.thinking) for s in STEPS
    ]
    calls = [call for step in reply.tool_steps for call in step.calls]
    assert [(c.id, c.name, dict(c.arguments), c.outcome, c.result) for c in calls] == [
        (c.id, c.name, dict(c.arguments), "ran", c.result) for c in (TIME_CALL, REFUSED_CALL)
    ]


def test_a_turn_stopped_after_a_call_has_no_answer_and_imports_so() -> None:
    conv = conversation(answer="")
    data = json.loads(to_json(conv, {}))
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "user"]
    imported, _ = parse_import(json.dumps(data["messages"]))
    reply = imported.messages[1]
    assert (reply.role, reply.content, len(reply.tool_steps)) == ("assistant", "", 2)
    assert not reply.ends_in_answer


def test_openai_files_from_other_tools_import() -> None:
    """Arguments as a string or an object, content null, a call without an
    id, a call that got no result."""
    items = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": "weather", "arguments": {"c": "Oslo"}}},
                {"id": "x", "type": "function", "function": {"name": "w2", "arguments": ""}},
            ],
        },
        {"role": "tool", "content": "Snow."},
        {"role": "assistant", "content": "Snowing in Oslo."},
    ]
    imported, _ = parse_import(json.dumps(items))
    reply = imported.messages[1]
    first, second = reply.tool_steps[0].calls
    assert (first.name, dict(first.arguments), first.outcome, first.result) == (
        "weather",
        {"c": "Oslo"},
        "ran",
        "Snow.",
    )
    assert len(first.id) == 9
    assert (second.arguments, second.outcome) == ({}, "cancelled")
    assert reply.content == "Snowing in Oslo."


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([{"role": "tool", "content": "x"}], "message 1 is a tool result that follows no call"),
        (
            [{"role": "assistant", "content": "", "tool_calls": "weather"}],
            '"tool_calls" that are not a list',
        ),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
            "call 1 of message 1 names no tool",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": "w", "arguments": "{nope"}}],
                }
            ],
            "arguments of call 1 of message 1 are not JSON",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"name": "w", "arguments": "[]"}}]}],
            "are not an object",
        ),
        (
            [
                {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "w"}}]},
                {"role": "tool", "tool_call_id": "b", "content": "x"},
            ],
            "message 2 is a tool result for no call waiting for one",
        ),
    ],
)
def test_tool_messages_that_do_not_fit_are_refused(items: list[object], expected: str) -> None:
    with pytest.raises(ImportFormatError, match=expected):
        parse_import(json.dumps(items))


def test_damaged_tool_steps_in_a_kvchat_file_are_refused() -> None:
    data = json.loads(to_json(conversation(), {}))
    data["kvchat"]["tree"][1]["tool_steps"][0]["calls"][0]["outcome"] = "boom"
    with pytest.raises(ImportFormatError, match='message 2: tool step 1, call 1 has an "outcome"'):
        parse_import(json.dumps(data))


def test_a_steps_figures_that_are_not_finite_import_and_are_kept(tmp_path: Path) -> None:
    """JSON as Python writes it (`Infinity`): stored and read back as it came."""
    data = json.loads(to_json(conversation(), {}))
    data["kvchat"]["tree"][1]["tool_steps"][0]["stats"]["decode_tps"] = float("inf")
    imported, sampling = parse_import(json.dumps(data))
    with Store(tmp_path / "c.db") as store:
        conv_id = store.import_conversation(imported, sampling)
        step = store.get_conversation(conv_id).messages[1].tool_steps[0]
    assert step.stats is not None and step.stats.decode_tps == float("inf")
