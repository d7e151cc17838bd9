"""A tool turn kept (issue 30, point 7): one reply whose steps (each
intermediate reply and its calls, with what came of each) are stored with
it; written as the turn goes, through branches, regenerate and fork;
databases of the schema before it migrated whole; search in the calls'
arguments and results; what is read back is checked."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.saver import ConversationSaver, ConversationSettings
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.conversations.tool_steps import (
    ToolCallRecord,
    ToolStep,
    ToolStepsError,
    search_text,
    steps_from_json,
    steps_json,
)
from chat.settings.schema import SamplingSettings
from tests.conversations.conftest import insert_a_question, old_database, question, saver_for

SETTINGS = ConversationSettings("", asdict(SamplingSettings()), "/m/qwen.gguf", "qwen")
STEP_STATS = ReplyStats(200, 200, 18, 0.3, 30.0, "done", seed=1, total_s=0.9)
ANSWER_STATS = ReplyStats(260, 60, 12, 0.1, 31.0, "done", seed=1, total_s=0.5)

TIME_CALL = ToolCallRecord(
    id="a1B2c3D4e",
    name="get_current_time",
    arguments={"timezone": "Asia/Tokyo"},
    server="time",
    tool="get_current_time",
    outcome="ran",
    result='{"timezone": "Asia/Tokyo", "datetime": "2026-12-02T22:10:00+09:00"}',
    result_tokens=31,
    duration_s=0.042,
)
REFUSED_CALL = ToolCallRecord(
    id="Zz9Yy8Xx7",
    name="delete_file",
    arguments={"path": "/home/user/notes.txt"},
    server="files",
    tool="delete_file",
    outcome="refused",
    result="The user refused to run this tool call.",
    is_error=False,
)
STEPS = (
    ToolStep(
        "Let me look.",
        (TIME_CALL,),
        thinking="The user wants the time in Tokyo.",
        token_ids=(10, 11, 12),
        stats=STEP_STATS,
    ),
    ToolStep("", (REFUSED_CALL,), stats=replace(STEP_STATS, prompt_evaluated=48)),
)


def tool_conversation(steps: tuple[ToolStep, ...] = STEPS) -> Conversation:
    return Conversation(
        messages=[
            Message("user", "What time is it in Tokyo?"),
            Message(
                "assistant",
                "It is 22:10 in Tokyo.",
                stats=ANSWER_STATS,
                token_ids=[5, 6, 7],
                tool_steps=steps,
            ),
        ]
    )


# -- the data type


def test_a_step_that_thought_keeps_the_text_the_model_was_sent() -> None:
    """Its answer and thinking apart (shown), the raw text as the model read
    it in the next step (sent again, without a `reasoning_content`)."""
    raw = "<think>The user wants the time in Tokyo.</think>Let me look."
    step = replace(STEPS[0], sent=raw)
    text = steps_json((step,))
    assert text is not None and steps_from_json(text) == (step,)
    message = step.reply_message()
    assert message["content"] == raw and "reasoning_content" not in message
    assert search_text([step]) == search_text([STEPS[0]])


def test_steps_round_trip_through_their_stored_form() -> None:
    text = steps_json(STEPS)
    assert text is not None
    assert steps_from_json(text) == STEPS
    assert steps_json(()) is None
    assert steps_from_json(None) == ()
    step = STEPS[0]
    # The reply as the model wrote it, in the shape chat templates read.
    assert step.reply_message() == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "a1B2c3D4e",
                "type": "function",
                "function": {"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}},
            }
        ],
        "reasoning_content": "The user wants the time in Tokyo.",
        "token_ids": [10, 11, 12],
    }
    assert TIME_CALL.result_message() == {
        "role": "tool",
        "content": TIME_CALL.result,
        "tool_call_id": "a1B2c3D4e",
        "name": "get_current_time",
    }


def _stored(change: object) -> str:
    """The stored form of STEPS with one change made to its JSON."""
    data = json.loads(steps_json(STEPS) or "")
    change(data)  # type: ignore[operator]
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "not JSON"),
        ("[" * 100_000, "not JSON"),
        ("[]", "not an object"),
        (json.dumps({"version": 99, "steps": []}), "version 99"),
        (json.dumps({"version": 1, "steps": {}}), "not a list"),
        (_stored(lambda d: d["steps"][0].pop("calls")), 'tool step 1 has no "calls"'),
        (
            _stored(lambda d: d["steps"][1]["calls"][0].update(outcome="exploded")),
            'tool step 2, call 1 has an "outcome"',
        ),
        (
            _stored(lambda d: d["steps"][0]["calls"][0].update(arguments="{}")),
            '"arguments" that are not an object',
        ),
        (_stored(lambda d: d["steps"][0].update(token_ids=[1, -2])), "token ids"),
        (_stored(lambda d: d["steps"][0]["calls"][0].update(result=None)), 'text "result"'),
        (_stored(lambda d: d["steps"][0]["calls"][0].update(cut="yes")), '"cut"'),
        (
            _stored(lambda d: d["steps"][0]["calls"][0].update(duration_s=float("inf"))),
            '"duration_s"',
        ),
        (_stored(lambda d: d["steps"][0]["stats"].pop("prompt_tokens")), "prompt_tokens"),
        (_stored(lambda d: d["steps"][0].update(sent=3)), '"sent" that is not text'),
    ],
)
def test_stored_steps_that_are_not_kvchats_are_refused(text: str, said: str) -> None:
    with pytest.raises(ToolStepsError, match=None) as caught:
        steps_from_json(text)
    assert said in str(caught.value)


def test_a_damaged_stored_value_reads_as_a_reply_without_steps(store: Store, db_path: Path) -> None:
    conv = tool_conversation()
    conv_id = store.create_conversation(conv)
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE messages SET tool_steps = '{\"version\": 1' WHERE role = 'assistant'")
    reply = store.get_conversation(conv_id).messages[-1]
    assert (reply.content, reply.tool_steps) == ("It is 22:10 in Tokyo.", ())


# -- saved with the reply


def test_a_tool_reply_is_saved_with_its_steps_as_it_goes(store: Store, db_path: Path) -> None:
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS, "What time is it in Tokyo?")
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress("", tool_steps=STEPS[:1])  # the first call's result is in
    with sqlite3.connect(db_path) as conn:
        stored, text = conn.execute(
            "SELECT tool_steps, tool_text FROM messages WHERE role = 'assistant'"
        ).fetchone()
    assert steps_from_json(stored) == STEPS[:1]
    assert "Asia/Tokyo" in text and "2026-12-02T22:10" in text
    saver.save_progress("It is", tool_steps=STEPS)
    saver.finish_reply("It is 22:10 in Tokyo.", ANSWER_STATS, [5, 6, 7], tool_steps=STEPS)
    conv.append(replace(reply, content="It is 22:10 in Tokyo.", tool_steps=STEPS))
    assert conv.id is not None
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.tool_steps, saved.state) == (
        "It is 22:10 in Tokyo.",
        STEPS,
        "complete",
    )
    assert saved.tool_steps[0].stats == STEP_STATS
    assert saved.tool_steps[0].calls[0].duration_s == pytest.approx(0.042)


def test_a_reply_without_steps_keeps_none_and_continuing_keeps_them(store: Store) -> None:
    saver = saver_for(store)
    conv = tool_conversation()
    conv.messages[-1].stats = replace(ANSWER_STATS, finish_reason="max_tokens")
    saver.save_messages(conv, SETTINGS)
    assert conv.id is not None
    # A continuation writes the answer on; the steps before it stay.
    reply = conv.messages[-1]
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress(reply.content + " Sleep")
    saver.finish_reply(reply.content + " Sleep well.", ANSWER_STATS, None)
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.tool_steps) == ("It is 22:10 in Tokyo. Sleep well.", STEPS)
    plain = Conversation(messages=[Message("user", "Hi"), Message("assistant", "Hello.")])
    store.create_conversation(plain)
    assert plain.id is not None
    assert store.get_conversation(plain.id).messages[-1].tool_steps == ()


def test_branches_regenerate_and_fork_keep_each_replys_own_steps(store: Store) -> None:
    conv = tool_conversation()
    store.create_conversation(conv)
    assert conv.id is not None
    first = conv.messages[-1]
    other_steps = (ToolStep("", (replace(TIME_CALL, arguments={"timezone": "UTC"}),)),)
    again = Message("assistant", "It is 13:10 UTC.", tool_steps=other_steps)
    conv.add_sibling(first, again)  # regenerated: a branch beside the first reply
    store.add_message(conv.id, again)
    opened = store.get_conversation(conv.id)
    question = opened.messages[0]
    replies = opened.tree.children(question)
    assert [r.tool_steps for r in replies] == [STEPS, other_steps]
    fork = opened.fork_at(replies[0])
    store.create_conversation(fork)
    assert fork.id is not None
    assert store.get_conversation(fork.id).messages[-1].tool_steps == STEPS


def test_a_final_write_that_failed_is_written_later_with_its_steps(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat.errors import StoreError

    reports: list[str] = []
    saver = ConversationSaver(reports.append)
    saver.attach(store)
    conv = Conversation()
    question(saver, conv, SETTINGS, "Time?")
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    real = store.update_message_content

    def full_disk(*args: object, **kwargs: object) -> None:
        raise StoreError("The disk is full.")

    monkeypatch.setattr(store, "update_message_content", full_disk)
    saver.finish_reply("It is late.", ANSWER_STATS, None, tool_steps=STEPS)
    assert saver.failing
    reply.content, reply.tool_steps = "It is late.", STEPS
    conv.append(reply)
    monkeypatch.setattr(store, "update_message_content", real)
    saver.retry(conv, SETTINGS)
    assert not saver.failing
    assert conv.id is not None
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.tool_steps) == ("It is late.", STEPS)


# -- search


def test_search_finds_the_calls_arguments_and_results(store: Store) -> None:
    conv_id = store.create_conversation(tool_conversation())
    store.create_conversation(Conversation(messages=[Message("user", "Tokyo tower")]))
    assert [s.id for s in store.list_conversations("2026-12-02T22")] == [conv_id]
    assert [s.id for s in store.list_conversations("notes.txt")] == [conv_id]  # refused call
    assert [s.id for s in store.list_conversations("get_current_time")] == [conv_id]
    # Not the thinking, as for replies.
    assert store.list_conversations("wants") == []
    assert store.count_conversations("datetime") == 1


def test_search_without_fts_finds_the_calls_too(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chat.conversations.search as search_module

    monkeypatch.setattr(search_module, "fts5_available", lambda conn: False)
    with Store(db_path) as store:
        assert not store.has_fts
        conv_id = store.create_conversation(tool_conversation())
        assert [s.id for s in store.list_conversations("Asia/Tokyo")] == [conv_id]
        assert store.list_conversations("wants the time") == []
    monkeypatch.undo()
    # Opened again with FTS5: both indexes are built from the rows.
    with Store(db_path) as store:
        assert store.has_fts
        assert [s.id for s in store.list_conversations("Asia/Tokyo")] == [conv_id]
        assert [s.id for s in store.list_conversations("datetime")] == [conv_id]


def test_search_text_is_what_the_model_said_and_the_calls() -> None:
    text = search_text(STEPS)
    assert "Let me look." in text and "Asia/Tokyo" in text and "refused" in text
    assert "wants the time" not in text


# -- migration


def test_migrating_a_schema_8_database_keeps_every_row(db_path: Path) -> None:
    """A database as the kvchat before tool steps made it: every message
    comes back as it was, with no steps, still found by search; new replies
    then keep theirs."""
    conn = old_database(db_path, 8)
    insert_a_question(conn)
    conn.execute(
        "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, content, "
        "created, token_count, prompt_tokens, prompt_evaluated, generated_tokens, ttft_s, "
        "decode_tps, finish_reason, seed, total_s, token_ids, thinking) VALUES "
        "(2, 1, 1, 1, 1, 'assistant', 'Four.', 3.0, 9, 20, 20, 9, "
        "0.1, 30.0, 'done', 4, 0.4, X'0100000002000000', 'sum')"
    )
    conn.close()
    with Store(db_path) as store:
        conv = store.get_conversation(1)
        user, reply = conv.messages
        assert (user.content, user.tool_steps) == ("What is 2+2?", ())
        assert (reply.content, reply.thinking, reply.tool_steps) == ("Four.", "sum", ())
        assert reply.token_ids == [1, 2]
        assert [s.id for s in store.list_conversations("Four")] == [1]
        new = Message("assistant", "4", parent=user, tool_steps=STEPS)
        store.add_message(1, new)
        assert store.get_conversation(1).messages[-1].tool_steps == STEPS
        assert [s.id for s in store.list_conversations("Asia/Tokyo")] == [1]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 3
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
