"""A tool turn kept and sent again (issue 30, point 7): the tool loop's
outcome made the steps a reply keeps, and a kept reply made again the
messages the model saw; with the real model behind a tool-calling template,
a reopened conversation's next prompt is the one the model saw, token for
token, and its next turn evaluates only what is new."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chat.bench.tools import StepGrammars
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.engine.kv_state import common_prefix
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Finished
from chat.engine.state_cache import StateCache
from chat.engine.tool_calls.calls import ToolCall, ToolDefinition
from chat.session.context_window import ContextBudget, prompt_messages
from chat.session.resume import Resumer, conversation_key
from chat.session.tool_history import answer_of, chat_messages_of, tool_steps_of
from chat.session.tool_loop import (
    CallRecord,
    OfferedTool,
    PermissionRequest,
    Step,
    ToolLoop,
    ToolLoopOutcome,
)
from chat.settings.schema import ModelSettings, SamplingSettings
from chat.tools.permissions import Choice, Grant, Permissions
from tests.engine.tool_models import OPENS_HERMES_CALL, qwen25_model
from tests.tools.conftest import running, sdk_server

GREEDY = SamplingSettings(temperature=0.0, max_tokens=80, seed=1)
QUESTION = "Please echo hello, then tell me."
ECHO = OfferedTool(
    ToolDefinition(
        "echo",
        "The echo tool.",
        {
            "type": "object",
            "properties": {"text": {"type": "string", "enum": ["hello"]}},
            "required": ["text"],
        },
    ),
    "sdk",
    "echo",
)
STATS = ReplyStats(100, 100, 12, 0.2, 30.0, "done", seed=1)


def plain(value: Any) -> Any:
    """Tuples as lists, as JSON (and a template) sees them."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def scripted_outcome(answered: bool = True) -> ToolLoopOutcome:
    """A two-call turn as the loop reports it: a reply calling two tools
    (one refused), then the answer (or none: stopped after the calls)."""
    calls = (ToolCall("echo", {"text": "hi"}, "aaaaaaaa1"), ToolCall("rm", {"p": "/"}, "bbbbbbbb2"))
    first = Finished("Calling.", STATS, token_ids=(1, 2, 3), tool_calls=calls)
    records = (
        CallRecord(calls[0], "sdk", "echo", "ran", "hi", 0.01, result_tokens=1),
        CallRecord(calls[1], "fs", "rm", "refused", "The user refused to run this tool call."),
    )
    added: list[Any] = [
        {
            "role": "assistant",
            "content": "Calling.",
            "tool_calls": [call.for_template() for call in calls],
            "token_ids": (1, 2, 3),
        },
        *(
            {"role": "tool", "content": r.result, "tool_call_id": r.call.id, "name": r.call.name}
            for r in records
        ),
    ]
    steps = [Step(first, records)]
    if answered:
        answer = Finished("Said hi.", STATS, token_ids=(4, 5))
        added.append({"role": "assistant", "content": "Said hi.", "token_ids": (4, 5)})
        steps.append(Step(answer))
    return ToolLoopOutcome("answered" if answered else "cancelled", steps, added)


def kept_reply(outcome: ToolLoopOutcome) -> Message:
    """The reply a tool turn leaves: its answer, with its steps before it."""
    answer = answer_of(outcome)
    if answer is None:
        return Message("assistant", "", tool_steps=tool_steps_of(outcome))
    return Message(
        "assistant",
        answer.text,
        stats=answer.stats,
        token_ids=list(answer.token_ids) if answer.token_ids is not None else None,
        tool_steps=tool_steps_of(outcome),
    )


def test_a_kept_turn_is_sent_again_as_the_loop_sent_it() -> None:
    outcome = scripted_outcome()
    reply = kept_reply(outcome)
    (step,) = reply.tool_steps
    assert (step.content, step.token_ids, step.stats) == ("Calling.", (1, 2, 3), STATS)
    assert [(c.server, c.tool, c.outcome) for c in step.calls] == [
        ("sdk", "echo", "ran"),
        ("fs", "rm", "refused"),
    ]
    assert plain(chat_messages_of(reply)) == plain(outcome.added)


def test_a_turn_stopped_after_its_calls_is_sent_again_without_an_answer() -> None:
    outcome = scripted_outcome(answered=False)
    reply = kept_reply(outcome)
    assert not reply.ends_in_answer
    assert plain(chat_messages_of(reply)) == plain(outcome.added)


def test_the_prompt_of_the_next_turn_expands_the_tool_turn() -> None:
    outcome = scripted_outcome()
    conv = Conversation(messages=[Message("user", QUESTION), kept_reply(outcome)])
    budget = ContextBudget(lambda messages, opening: [0] * (10 * len(messages)), 4096)
    plan = budget.plan("", conv.messages, "Thanks.", 100, "stop")
    sent = prompt_messages(conv, plan, Message("user", "Thanks."))
    assert plain(sent) == plain(
        [
            {"role": "user", "content": QUESTION},
            *outcome.added,
            {"role": "user", "content": "Thanks."},
        ]
    )
    # Counted as what is sent: its three messages and the answer.
    assert budget.message_tokens("", conv.messages[1], conv.messages[0]) == 40


# -- with the real model


@pytest.fixture(scope="module")
def tool_model(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen25_model(demo_model, tmp_path_factory.mktemp("tool-history"))


def loaded(model: Path, log: Path) -> LlamaEngine:
    return load_engine(model, ModelSettings(n_ctx=4096), log)


@pytest.fixture(scope="module")
def tool_engine(tool_model: Path) -> Iterator[LlamaEngine]:
    engine = loaded(tool_model, tool_model.parent / "llama.log")
    yield engine
    engine.close()


async def never_asked(request: PermissionRequest) -> Choice:
    raise AssertionError("the server is allowed beforehand")


async def tool_turn(engine: LlamaEngine, question: list[Any], logs: Path) -> ToolLoopOutcome:
    """One turn of the real model: it calls the SDK server's echo, reads
    the result and answers."""
    async with running([sdk_server()], logs) as servers:
        loop = ToolLoop(
            StepGrammars(engine, [OPENS_HERMES_CALL]),  # type: ignore[arg-type]
            servers,
            Permissions(None, [Grant("sdk")]),
            [ECHO],
            never_asked,
            sampling=GREEDY,
        )
        outcome = await loop.run(question)
    assert outcome.end == "answered", outcome.problem
    return outcome


async def test_a_reopened_tool_turn_is_sent_as_the_model_saw_it_and_reuses_the_cache(
    tool_engine: LlamaEngine, tool_model: Path, tmp_path: Path
) -> None:
    engine = tool_engine
    definitions = [ECHO.definition]
    question: list[Any] = [{"role": "user", "content": QUESTION}]
    outcome = await tool_turn(engine, question, tmp_path)
    final = outcome.steps[-1].finished
    assert final.token_ids, "the answer keeps its sampled tokens"
    # Saved as one reply, and reopened.
    conv = Conversation(messages=[Message("user", QUESTION), kept_reply(outcome)])
    with Store(tmp_path / "c.db") as store:
        conv_id = store.create_conversation(conv)
        reopened = store.get_conversation(conv_id)
    assert [m.role for m in reopened.messages] == ["user", "assistant"]
    (step,) = reopened.messages[1].tool_steps
    assert (step.calls[0].result, step.calls[0].outcome) == ("hello", "ran")

    new_text = "Thanks. Now say it again."
    budget = ContextBudget(engine.tokenize_chat, engine.info.n_ctx)
    plan = budget.plan("", reopened.messages, new_text, GREEDY.max_tokens, "stop")
    assert plan.problem is None
    prompt = prompt_messages(reopened, plan, Message("user", new_text))
    # Exactly what the model saw, then the new message.
    seen = [*question, *outcome.added, {"role": "user", "content": new_text}]
    ids = engine.tokenize_chat(prompt, tools=definitions)
    assert ids == engine.tokenize_chat(seen, tools=definitions)
    # Counted exactly (the meter counts without the tools' definitions).
    assert plan.used == len(engine.tokenize_chat(prompt))
    # The steps (the call's reply and its result) are the meter's tools
    # segment: what the prompt has more than with the answer alone.
    answer_alone = chat_messages_of(replace(reopened.messages[1], tool_steps=()))
    without_steps = engine.tokenize_chat([prompt[0], *answer_alone, prompt[-1]])
    assert plan.tool_steps == len(engine.tokenize_chat(prompt)) - len(without_steps) > 0
    # The KV cache holds the last step's prompt and the answer as sampled: the
    # next turn evaluates only what comes after them.
    last_prompt = engine.tokenize_chat([*question, *outcome.added[:-1]], tools=definitions)
    cached = last_prompt + list(final.token_ids)
    assert common_prefix(ids, cached) == len(cached)
    # As the app does while the user reads a seeded reply (chat/session/turn.py):
    # the answer, evaluated a token at a time, is evaluated again in batches,
    # so that the same seed gives the same next reply.
    engine.rebatch_reply()
    # Left: its KV state is saved (kvchat does so when another conversation
    # opens, or at quit).
    resumer = Resumer(StateCache(tmp_path / "states", 256 * 1024 * 1024))
    assert resumer.save_in_background(engine, conversation_key(tmp_path / "c.db", conv_id))
    assert resumer.wait(60)
    warm = next_reply(engine, prompt, definitions)
    assert warm.stats.prompt_tokens == len(ids)
    assert warm.stats.prompt_evaluated == len(ids) - len(cached)
    # Reopened in a new process (the model loaded anew): the saved state is
    # put back, and the same turn evaluates the same few tokens, and replies
    # the same.
    fresh = loaded(tool_model, tmp_path / "fresh.log")
    try:
        assert resumer.restore_for(fresh, ids) == len(cached)
        restored = next_reply(fresh, prompt, definitions)
    finally:
        fresh.close()
    assert restored.stats.prompt_evaluated == len(ids) - len(cached)
    assert restored.text == warm.text


def next_reply(
    engine: LlamaEngine, prompt: list[dict[str, str]], tools: list[ToolDefinition]
) -> Finished:
    events = list(engine.stream_reply(prompt, GREEDY, threading.Event(), tools=tools))
    finished = events[-1]
    assert isinstance(finished, Finished)
    return finished


async def test_a_reopened_tool_turn_cut_short_goes_on_from_the_cache(
    tool_engine: LlamaEngine, tmp_path: Path
) -> None:
    """Continuing (Ctrl+L) a tool turn's answer that was cut short: the
    prompt is the steps as the model saw them and the answer so far, which
    the KV cache holds; only the new text is generated."""
    engine = tool_engine
    definitions = [ECHO.definition]
    question: list[Any] = [{"role": "user", "content": QUESTION}]
    outcome = await tool_turn(engine, question, tmp_path)
    engine.rebatch_reply()  # as the app does after a seeded reply
    reply = kept_reply(outcome)
    assert reply.token_ids is not None and len(reply.token_ids) > 3
    # Cut short after three tokens (max tokens), saved, reopened.
    cut = reply.token_ids[:3]
    reply.content = engine.chat_prompt.spell(cut).decode("utf-8")
    reply.token_ids = cut
    assert reply.stats is not None
    reply.stats.finish_reason = "max_tokens"
    conv = Conversation(messages=[Message("user", QUESTION), reply])
    with Store(tmp_path / "c.db") as store:
        conv_id = store.create_conversation(conv)
        reopened = store.get_conversation(conv_id)
    budget = ContextBudget(engine.tokenize_chat, engine.info.n_ctx)
    plan = budget.plan("", reopened.messages, None, GREEDY.max_tokens, "stop")
    prompt = prompt_messages(reopened, plan)
    assert plain(prompt[1:-1]) == plain(outcome.added[:-1])  # the steps, as the model saw them
    events = list(
        engine.stream_reply(
            prompt, GREEDY, threading.Event(), continue_last=True, tools=definitions
        )
    )
    finished = events[-1]
    assert isinstance(finished, Finished)
    last_prompt = engine.tokenize_chat([*question, *outcome.added[:-1]], tools=definitions)
    # The earlier prompt and the three tokens kept: all in the cache already.
    # As for any repeatable continuation (tests/engine/test_continue.py), the
    # last token goes again, with the one before it (never a one-token batch).
    assert finished.stats.prompt_tokens == len(last_prompt) + 3
    assert finished.stats.prompt_evaluated == 2
    assert finished.stats.generated_tokens > 0
