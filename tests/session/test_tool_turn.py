"""A turn with tools (chat.session.tool_turn through chat.session.turn), no
Textual: the reply runs the tool loop when tools are on and the model can
call them, reports each step, stops at any step, keeps what was done; the
plan counts the tool definitions. With the scripted model and servers, and
with the real parts: the demo model behind Qwen 2.5's template and the
tests' SDK-written MCP server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chat.bench.tools import ANSWER
from chat.conversations.conversation import system_messages
from chat.conversations.store import Store
from chat.conversations.tool_steps import search_text
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.reasoning.markers import THINK, Reasoning
from chat.session.tool_loop import CANCELLED, REFUSED, PermissionRequest, ToolLoopSettings
from chat.session.tool_turn import (
    ConversationTools,
    ToolCallAsked,
    ToolCallEnded,
    ToolCallStarted,
    ToolStepEnded,
    ToolTurnStopped,
)
from chat.session.turn import TurnEnded, TurnProgress, TurnStarted, TurnText
from chat.settings.schema import ModelSettings, Settings
from chat.tools.permissions import Choice, Grant, Permissions
from chat.tools.status import ServerState
from tests.engine.tool_models import OPENS_HERMES_CALL, qwen25_model
from tests.fakes import ScriptedEngine
from tests.session.test_turn import Recorded
from tests.tool_fakes import FakeToolServers, ScriptedToolEngine, echo_call
from tests.tools.conftest import running, sdk_server


class Answers:
    """The permission question, answered with `choice` (None: never)."""

    def __init__(self, choice: Choice | None) -> None:
        self.choice = choice
        self.asked: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest) -> Choice:
        self.asked.append(request)
        if self.choice is None:
            await asyncio.Event().wait()
        assert self.choice is not None
        return self.choice


class FirstOnly(Answers):
    """Answers the first question; the others wait for ever."""

    async def __call__(self, request: PermissionRequest) -> Choice:
        if self.asked:
            self.choice = None
        return await super().__call__(request)


def with_tools(
    recorded: Recorded,
    servers: Any,
    answers: Answers,
    permissions: Permissions | None = None,
    settings: ToolLoopSettings | None = None,
) -> ConversationTools:
    tools = ConversationTools(
        servers, permissions or Permissions(None), settings or ToolLoopSettings(), answers
    )
    recorded.turn.tools = tools
    return tools


def tools_tokens(engine: Any, recorded: Recorded, tools: ConversationTools) -> int:
    """What the tools add to a prompt, counted on its own: the system prompt
    with and without them."""
    head = system_messages(recorded.turn.session.conversation.system_prompt)
    head = head or [{"role": "user", "content": ""}]
    with_them = engine.tokenize_chat(head, False, tools=tools.definitions())
    return len(with_them) - len(engine.tokenize_chat(head, False))


def calling_engine(**options: Any) -> ScriptedToolEngine:
    """Says "Let me look.", calls echo("hi"), then answers "It says hi."."""
    return ScriptedToolEngine(
        [["Let", " me", " look."], ["It", " says", " hi."]], {0: echo_call("hi")}, **options
    )


async def test_a_turn_with_tools_asks_runs_the_call_and_answers(tmp_path: Path) -> None:
    engine = calling_engine()
    servers = FakeToolServers()
    answers = Answers(Choice.ONCE)
    with Store(tmp_path / "c.db") as store:
        recorded = Recorded(engine, store)
        with_tools(recorded, servers, answers)
        turn = recorded.turn
        assert turn.send("What does echo say?") is None
        await asyncio.wait_for(turn.stopped(), 10)
        assert engine.offered == [["echo"], ["echo"]]
        (request,) = answers.asked
        assert (request.server, request.tool, dict(request.arguments)) == (
            "notes",
            "echo",
            {"text": "hi"},
        )
        assert servers.called == [("notes", "echo", {"text": "hi"})]
        # The second reply reads the call and its result.
        second_prompt = engine.calls[1][0]
        assert [m["role"] for m in second_prompt[-3:]] == ["user", "assistant", "tool"]
        assert second_prompt[-1]["content"] == "hi"
        kinds = [type(e).__name__ for e in recorded.events if not isinstance(e, TurnText)]
        assert kinds == [
            "TurnStarted",
            "ToolStepEnded",
            "ToolCallAsked",
            "ToolCallStarted",
            "ToolCallEnded",
            "TurnEnded",
        ]
        (step,) = recorded.of(ToolStepEnded)
        assert (step.step, step.text) == (1, "Let me look.")
        (ended_call,) = recorded.of(ToolCallEnded)
        assert (ended_call.record.outcome, ended_call.record.result) == ("ran", "hi")
        # The text came as it streamed: the first step's, then the answer's.
        assert recorded.text() == "Let me look.It says hi."
        (ended,) = recorded.of(TurnEnded)
        assert ended.reply.content == "It says hi."
        assert ended.reply.stats.finish_reason == "done"
        conv_id = turn.session.conversation.id
        assert conv_id is not None
        saved = store.get_conversation(conv_id)
        assert [(m.role, m.content) for m in saved.messages] == [
            ("user", "What does echo say?"),
            ("assistant", "It says hi."),
        ]
        # Kept with the reply: the step, its call and the result.
        (kept,) = saved.messages[1].tool_steps
        (kept_call,) = kept.calls
        assert (kept.content, kept_call.server, kept_call.tool) == ("Let me look.", "notes", "echo")
        assert (kept_call.outcome, kept_call.result) == ("ran", "hi")
        # The next turn sends the turn as the model saw it.
        engine.tool_calls = {}
        assert turn.send("Thanks.") is None
        await asyncio.wait_for(turn.stopped(), 10)
        third_prompt = engine.calls[2][0]
        assert [m["role"] for m in third_prompt[-5:]] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
        ]


async def test_each_steps_prompt_says_how_far_it_has_been_read() -> None:
    # The tools' definitions make a tool turn's prompt long: the status bar
    # says how far it has been read, as for a plain reply (the loop dropped
    # the engine's progress, and a 2,000-token prompt showed "generating…").
    engine = calling_engine(prompt_batches=2)
    recorded = Recorded(engine)
    with_tools(recorded, FakeToolServers(), Answers(Choice.ONCE))
    assert recorded.turn.send("What does echo say?") is None
    await asyncio.wait_for(recorded.turn.stopped(), 10)
    kinds = [type(e).__name__ for e in recorded.events if not isinstance(e, TurnText)]
    reading = ["TurnProgress"] * 3  # none read, then each of the two batches
    assert kinds == [
        "TurnStarted",
        *reading,
        "ToolStepEnded",
        "ToolCallAsked",
        "ToolCallStarted",
        "ToolCallEnded",
        *reading,
        "TurnEnded",
    ]
    first = recorded.of(TurnProgress)[2].progress
    assert first.done == first.total > 0


LOOKS = ["<think>", "I", " should", " look.", "</think>", "Let", " me", " look."]
"""A reasoning model's first step: it thinks, says so and calls echo."""


async def thinking_tool_turn(steps: list[list[str]], calls: bool = True) -> Recorded:
    """A tool turn of a reasoning model (its steps' tokens; `calls`: the
    first step calls echo), run to its end."""
    engine = ScriptedToolEngine(steps, {0: echo_call("hi")} if calls else {})
    engine.info = replace(engine.info, reasoning=Reasoning(THINK, "template"))
    recorded = Recorded(engine)
    with_tools(recorded, FakeToolServers(), Answers(Choice.ONCE))
    assert recorded.turn.send("Echo hi") is None
    await asyncio.wait_for(recorded.turn.stopped(), 10)
    return recorded


async def test_a_reasoning_model_thinks_apart_from_its_answer_in_each_step() -> None:
    recorded = await thinking_tool_turn(
        [LOOKS, ["<think>", "Got", " it.", "</think>", "It", " says", " hi."]]
    )
    (step,) = recorded.of(ToolStepEnded)
    assert step.text == "Let me look."
    thought = "".join(event.thinking for event in recorded.of(TurnText))
    assert "I should look." in thought and "Got it." in thought
    assert "<think>" not in recorded.text()
    (ended,) = recorded.of(TurnEnded)
    assert (ended.reply.content, ended.reply.thinking) == ("It says hi.", "Got it.")


@pytest.mark.parametrize("called", [True, False], ids=["after-a-call", "no-call"])
@pytest.mark.parametrize(
    ("last", "still_thinking"),
    [(["<think>", "Got", " it."], True), (["<think>", "Got", " it.", "</think>"], False)],
    ids=["cut-inside", "closed-at-the-end"],
)
async def test_a_tool_turns_reply_keeps_whether_it_ended_inside_its_thought(
    called: bool, last: list[str], still_thinking: bool
) -> None:
    """An empty answer does not say it: a thought may close on the reply's
    last tokens (chat_session.whole_reply then writes the closing marker)."""
    recorded = await thinking_tool_turn([LOOKS, last] if called else [last], calls=called)
    (ended,) = recorded.of(TurnEnded)
    reply = ended.reply
    assert (reply.content, reply.thinking, len(reply.tool_steps)) == ("", "Got it.", int(called))
    assert ended.in_thought == reply.thought_open == still_thinking


async def test_a_reasoning_models_kept_step_shows_no_markers_and_is_sent_as_it_was(
    tmp_path: Path,
) -> None:
    """A step's text is kept apart from its thinking (a reopened conversation
    draws it without `<think>`: tests/ui/screens/test_tool_calls.py), and the
    text the model read in the next step is kept too: the next turn's prompt
    sends the step exactly as the turn did."""
    engine = ScriptedToolEngine(
        [
            ["<think>", "I", " should", " look.", "</think>", "Let", " me", " look."],
            ["<think>", "Got", " it.", "</think>", "It", " says", " hi."],
            ["Welcome."],
        ],
        {0: echo_call("hi")},
    )
    engine.info = replace(engine.info, reasoning=Reasoning(THINK, "template"))
    with Store(tmp_path / "c.db") as store:
        recorded = Recorded(engine, store)
        with_tools(recorded, FakeToolServers(), Answers(Choice.ONCE))
        turn = recorded.turn
        assert turn.send("Echo hi") is None
        await asyncio.wait_for(turn.stopped(), 10)
        conv_id = turn.session.conversation.id
        assert conv_id is not None
        (step,) = store.get_conversation(conv_id).messages[-1].tool_steps
        assert (step.content, step.thinking) == ("Let me look.", "I should look.")
        raw = "<think>I should look.</think>Let me look."
        assert step.sent == raw
        assert "<think>" not in search_text([step])
        # The step as the turn's second reply read it...
        seen = engine.calls[1][0][-2]
        assert (seen["role"], seen["content"]) == ("assistant", raw)
        assert "reasoning_content" not in seen
        # ...is what the next turn sends, from the conversation reopened.
        reopened = store.get_conversation(conv_id)
        turn.session.conversation = reopened
        engine.tool_calls = {}
        assert turn.send("Thanks.") is None
        await asyncio.wait_for(turn.stopped(), 10)
    sent_again = engine.calls[2][0]
    index = next(i for i, m in enumerate(sent_again) if m.get("tool_calls"))
    assert sent_again[index] == seen
    assert sent_again[index + 1] == engine.calls[1][0][-1]  # the result


async def test_refused_the_model_reads_that_it_was_refused() -> None:
    engine = calling_engine()
    servers = FakeToolServers()
    recorded = Recorded(engine)
    with_tools(recorded, servers, Answers(Choice.REFUSE))
    assert recorded.turn.send("Echo hi") is None
    await asyncio.wait_for(recorded.turn.stopped(), 10)
    assert servers.called == []
    assert engine.calls[1][0][-1]["content"] == REFUSED
    (ended_call,) = recorded.of(ToolCallEnded)
    assert ended_call.record.outcome == "refused"
    assert recorded.of(TurnEnded)[0].reply.content == "It says hi."


async def test_always_for_the_tool_is_saved_and_not_asked_again(tmp_path: Path) -> None:
    engine = ScriptedToolEngine(
        [["Look."], ["Done."], ["Again."], ["Done."]], {0: echo_call("a"), 2: echo_call("b")}
    )
    answers = Answers(Choice.TOOL)
    permissions = Permissions(tmp_path / "permissions.json")
    recorded = Recorded(engine)
    with_tools(recorded, FakeToolServers(), answers, permissions)
    turn = recorded.turn
    assert turn.send("One") is None
    await asyncio.wait_for(turn.stopped(), 10)
    assert turn.send("Two") is None
    await asyncio.wait_for(turn.stopped(), 10)
    assert len(answers.asked) == 1  # the second call ran without a question
    assert Permissions(tmp_path / "permissions.json").lasting() == [Grant("notes", "echo")]
    assert [e.record.outcome for e in recorded.of(ToolCallEnded)] == ["ran", "ran"]


async def test_esc_while_asked_stops_the_turn_and_keeps_what_was_done() -> None:
    engine = calling_engine()
    servers = FakeToolServers()
    recorded = Recorded(engine)
    with_tools(recorded, servers, Answers(None))
    turn = recorded.turn
    assert turn.send("Echo hi") is None
    await recorded.until(lambda: recorded.of(ToolCallAsked))
    assert turn.generating
    assert turn.stop()
    await asyncio.wait_for(turn.stopped(), 10)
    assert servers.called == [] and len(engine.calls) == 1
    (ended_call,) = recorded.of(ToolCallEnded)
    assert (ended_call.record.outcome, ended_call.record.result) == ("cancelled", CANCELLED)
    (ended,) = recorded.of(TurnEnded)
    assert ended.reply.stats.finish_reason == "stopped"
    # Kept: the question and the reply (its text was the step's, shown above the call).
    assert [m.role for m in turn.session.conversation.messages] == ["user", "assistant"]
    assert not turn.stop()


async def test_the_steps_so_far_are_saved_as_each_call_ends(tmp_path: Path) -> None:
    engine = ScriptedToolEngine(
        [["Look."], ["Again."], ["Done."]], {0: echo_call("a"), 1: echo_call("b")}
    )
    answers = FirstOnly(Choice.ONCE)
    with Store(tmp_path / "c.db") as store:
        recorded = Recorded(engine, store)
        with_tools(recorded, FakeToolServers(), answers)
        turn = recorded.turn
        assert turn.send("Twice") is None
        await recorded.until(lambda: len(answers.asked) == 2)  # the second question waits
        conv_id = turn.session.conversation.id
        assert conv_id is not None
        reply_row = store.get_conversation(conv_id).messages[-1]
        (saved,) = reply_row.tool_steps  # the first step, its call ended
        assert [(c.arguments, c.result) for c in saved.calls] == [({"text": "a"}, "a")]
        assert turn.stop()
        await asyncio.wait_for(turn.stopped(), 10)
        final = store.get_conversation(conv_id).messages[-1]
        assert [[c.outcome for c in step.calls] for step in final.tool_steps] == [
            ["ran"],
            ["cancelled"],
        ]
        assert not final.ends_in_answer


async def test_esc_during_a_running_call_cancels_the_call() -> None:
    engine = calling_engine()
    servers = FakeToolServers()
    servers.hold = True
    recorded = Recorded(engine)
    with_tools(recorded, servers, Answers(None), Permissions(None, [Grant("notes")]))
    turn = recorded.turn
    assert turn.send("Echo hi") is None
    await recorded.until(lambda: recorded.of(ToolCallStarted))
    assert not recorded.of(ToolCallAsked)  # allowed beforehand: no question
    assert turn.stop()
    await asyncio.wait_for(turn.stopped(), 10)
    assert servers.cancelled == 1
    (ended_call,) = recorded.of(ToolCallEnded)
    assert ended_call.record.outcome == "cancelled"
    assert recorded.of(TurnEnded)[0].reply.stats.finish_reason == "stopped"


async def test_esc_in_a_later_step_keeps_its_text() -> None:
    engine = ScriptedToolEngine([["Look."], ["slow "] * 40], {0: echo_call("hi")}, hold_after=3)
    recorded = Recorded(engine)
    with_tools(recorded, FakeToolServers(), Answers(Choice.ONCE))
    turn = recorded.turn
    assert turn.send("Echo hi") is None
    await recorded.until(lambda: len(engine.calls) == 2 and engine.holding.is_set())
    assert turn.stop()
    await asyncio.wait_for(turn.stopped(), 10)
    (ended,) = recorded.of(TurnEnded)
    assert ended.reply.content == "slow " * 4
    assert ended.reply.stats.finish_reason == "stopped"


async def test_the_most_steps_end_the_turn_with_a_sentence() -> None:
    engine = ScriptedToolEngine([["Look."]], {n: echo_call(str(n)) for n in range(5)})
    recorded = Recorded(engine)
    with_tools(
        recorded,
        FakeToolServers(),
        Answers(Choice.ONCE),
        settings=ToolLoopSettings(max_steps=2),
    )
    assert recorded.turn.send("Loop") is None
    await asyncio.wait_for(recorded.turn.stopped(), 10)
    assert len(engine.calls) == 2
    (stopped,) = recorded.of(ToolTurnStopped)
    assert "2 steps" in stopped.problem
    assert recorded.of(TurnEnded)


async def test_tools_off_a_server_not_ready_or_a_model_that_cannot_call_reply_plainly() -> None:
    engine = calling_engine()
    servers = FakeToolServers()
    recorded = Recorded(engine)
    tools = with_tools(recorded, servers, Answers(Choice.ONCE))
    tools.on = False
    assert recorded.turn.send("Hi") is None
    await asyncio.wait_for(recorded.turn.stopped(), 10)
    tools.on = True
    servers.set_state("notes", ServerState.STARTING)
    assert recorded.turn.send("Hi") is None
    await asyncio.wait_for(recorded.turn.stopped(), 10)
    assert engine.offered == [[], []]
    assert not recorded.of(ToolStepEnded)
    plain = Recorded(ScriptedEngine())
    with_tools(plain, FakeToolServers(), Answers(Choice.ONCE))
    assert plain.turn.tools_to_offer() == []  # not shown how to call


async def test_a_tool_or_server_turned_off_is_not_offered() -> None:
    engine = calling_engine()
    servers = FakeToolServers({"notes": ["echo", "other"], "web": ["echo"]})
    recorded = Recorded(engine)
    tools = with_tools(recorded, servers, Answers(Choice.ONCE))
    names = lambda: sorted(o.definition.name for o in recorded.turn.tools_to_offer())  # noqa: E731
    assert names() == ["notes_echo", "other", "web_echo"]
    tools.servers_off.add("web")
    assert names() == ["echo", "other"]
    tools.tools_off.add(("notes", "other"))
    assert names() == ["echo"]
    tools.reset()
    assert tools.on and names() == ["notes_echo", "other", "web_echo"]


async def test_the_plan_counts_the_tool_definitions_in_the_system_part() -> None:
    engine = calling_engine()
    recorded = Recorded(engine)
    tools = with_tools(recorded, FakeToolServers(), Answers(Choice.ONCE))
    with_tools_plan = recorded.turn.plan("Hello")
    tools.on = False
    without = recorded.turn.plan("Hello")
    assert with_tools_plan is not None and without is not None
    tools.on = True
    expected = tools_tokens(engine, recorded, tools)
    assert with_tools_plan.tools == expected > 0
    assert without.tools == 0
    assert with_tools_plan.system == without.system + expected
    assert with_tools_plan.new == without.new


async def test_a_prefill_renders_the_tools_the_reply_will_be_offered() -> None:
    engine = calling_engine()
    settings = Settings()
    settings.chat.prefill = True
    recorded = Recorded(engine, settings=settings)
    tools = with_tools(recorded, FakeToolServers({"notes": ["echo", "other"]}), Answers(None))
    turn = recorded.turn
    turn.typed = lambda: "Hello"
    tools.tools_off.add(("notes", "other"))
    turn.prefill_now()
    await recorded.until(lambda: engine.prefill_tools)
    tools.on = False
    turn.prefill_now()
    await recorded.until(lambda: len(engine.prefill_tools) == 2)
    assert engine.prefill_tools == [["echo"], []]
    assert engine.prefills[0][-1] == {"role": "user", "content": "Hello"}


# -- the real parts ---------------------------------------------------------------------


class StepGrammars:
    """The real engine, each model reply under the next grammar: the demo
    model writes a call's opener while they last (kvchat's own grammar then
    writes the call), then answers."""

    def __init__(self, engine: LlamaEngine, grammars: list[str]) -> None:
        self._engine = engine
        self.grammars = list(grammars)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def stream_reply(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._engine.grammar = self.grammars.pop(0) if self.grammars else ANSWER
        try:
            yield from self._engine.stream_reply(*args, **kwargs)
        finally:
            self._engine.grammar = None


@pytest.fixture(scope="module")
def qwen_engine(
    demo_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaEngine]:
    folder = tmp_path_factory.mktemp("tool-turn")
    loaded = load_engine(qwen25_model(demo_model, folder), ModelSettings(n_ctx=4096), folder / "l")
    yield loaded
    loaded.close()


async def test_the_real_model_calls_the_real_server_and_answers(
    qwen_engine: LlamaEngine, tmp_path: Path
) -> None:
    settings = Settings()
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 80
    settings.sampling.seed = 1
    settings.chat.prefill = False
    engine = StepGrammars(qwen_engine, [OPENS_HERMES_CALL])
    recorded = Recorded(engine, settings=settings)  # type: ignore[arg-type]
    answers = Answers(Choice.ONCE)
    async with running([sdk_server()], tmp_path) as servers:
        tools = ConversationTools(servers, Permissions(None), ToolLoopSettings(), answers)
        tools.tools_off |= {("sdk", name) for name in ("environment", "big", "wait", "crash")}
        recorded.turn.tools = tools
        plan = recorded.turn.plan("Please echo hello.")
        assert plan is not None and plan.tools == tools_tokens(qwen_engine, recorded, tools) > 0
        assert recorded.turn.send("Please echo hello.") is None
        await asyncio.wait_for(recorded.turn.stopped(), 120)
        # The next turn (tools still offered; the model answers) sends the
        # tool turn as the model saw it: the KV cache holds all of it, up to
        # the answer (which a pinned seed evaluates again, in batches).
        assert recorded.turn.send("Thanks.") is None
        await asyncio.wait_for(recorded.turn.stopped(), 120)
    next_turn = recorded.of(TurnEnded)[-1].reply.stats
    answer_step = recorded.of(TurnEnded)[0].reply.stats
    assert next_turn.prompt_reused >= answer_step.prompt_tokens, (next_turn, answer_step)
    (kept,) = recorded.of(TurnEnded)[0].reply.tool_steps
    assert [(c.tool, c.outcome) for c in kept.calls] == [("echo", "ran")]
    (request,) = answers.asked
    assert (request.server, request.tool) == ("sdk", "echo")
    (ended_call,) = recorded.of(ToolCallEnded)
    assert ended_call.record.outcome == "ran"
    assert ended_call.record.result == request.arguments["text"]
    (step,) = recorded.of(ToolStepEnded)
    ended = recorded.of(TurnEnded)[0]
    assert ended.reply.content and ended.reply.stats.finish_reason == "done"
    # The step after the call evaluated only the call, its result and the
    # template's words around them: the rest came from the KV cache.
    first, last = step.finished.stats, ended.reply.stats
    assert last.prompt_reused >= first.prompt_tokens - 2
    assert last.prompt_evaluated < first.prompt_evaluated
    assert isinstance(recorded.events[0], TurnStarted)
    # Each step's prompt said how far it had been read, before its text.
    kinds = [type(e) for e in recorded.events if not isinstance(e, TurnText)]
    step_ended = kinds.index(ToolStepEnded)
    assert TurnProgress in kinds[:step_ended] and TurnProgress in kinds[step_ended:]


async def tool_turn_of(
    qwen_engine: LlamaEngine, tmp_path: Path, prefill: bool
) -> tuple[Recorded, ToolStepEnded, int]:
    """Sends "Please echo hello." to the real model and server, from an empty
    KV cache; with `prefill`, typed and paused over first. Returns the
    turn, its first step and the tokens of the prompt the prefill made."""
    settings = Settings()
    settings.sampling.temperature = 0.8  # the seed decides: a repeatable reply
    settings.sampling.max_tokens = 60
    settings.sampling.seed = 11
    settings.chat.prefill = prefill
    engine = StepGrammars(qwen_engine, [OPENS_HERMES_CALL])
    recorded = Recorded(engine, settings=settings)  # type: ignore[arg-type]
    text = "Please echo hello."
    qwen_engine.reset()
    prefilled = 0
    async with running([sdk_server()], tmp_path) as servers:
        tools = with_tools(recorded, servers, Answers(Choice.ONCE))
        tools.tools_off |= {("sdk", name) for name in ("environment", "big", "wait", "crash")}
        turn = recorded.turn
        if prefill:
            turn.typed = lambda: text
            turn.prefill_now()
            prompt = turn.session.prefill_prompt(text)
            assert prompt is not None
            # The prompt the tool turn's first step sends: the tools rendered in it.
            tokens = qwen_engine.tokenize_chat(*prompt, tools=tools.definitions())
            assert len(tokens) > len(qwen_engine.tokenize_chat(*prompt)) + 50
            # All but the last token: that one is evaluated with the reply.
            await recorded.until(lambda: qwen_engine.cached_prefix(tokens) >= len(tokens) - 1, 60)
            prefilled = len(tokens)
        assert turn.send(text) is None
        await asyncio.wait_for(turn.stopped(), 120)
    (step,) = recorded.of(ToolStepEnded)
    return recorded, step, prefilled


async def test_a_prefill_evaluates_the_tool_turns_first_prompt_with_the_tools(
    qwen_engine: LlamaEngine, tmp_path: Path
) -> None:
    plain, plain_step, _ = await tool_turn_of(qwen_engine, tmp_path / "a", prefill=False)
    ahead, ahead_step, prefilled = await tool_turn_of(qwen_engine, tmp_path / "b", prefill=True)
    first, prefilled_first = plain_step.finished.stats, ahead_step.finished.stats
    assert first.prompt_evaluated == first.prompt_tokens == prefilled
    # The first step evaluated (next to) nothing: the prefill had done it.
    assert prefilled_first.prompt_tokens == prefilled
    assert prefilled_first.prompt_evaluated <= 2, prefilled_first
    # And the same seed gave the same turn: the step, its call, the answer.
    assert ahead_step.text == plain_step.text
    assert [c.arguments for c in ahead_step.finished.tool_calls] == [
        c.arguments for c in plain_step.finished.tool_calls
    ]
    plain_reply, ahead_reply = plain.of(TurnEnded)[0].reply, ahead.of(TurnEnded)[0].reply
    assert ahead_reply.content == plain_reply.content != ""
    assert ahead_reply.stats.finish_reason == "done"


async def test_a_reopened_conversation_sent_at_once_puts_its_kv_cache_back(
    qwen_engine: LlamaEngine, tmp_path: Path
) -> None:
    """Opened again (its KV cache saved when it was left, the engine's own
    cache gone) and sent to before a pause could prefill: the tool turn's
    first step starts from the saved cache, matched with the tools."""
    settings = Settings()
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 60
    settings.chat.prefill = False
    with Store(tmp_path / "c.db") as store:
        recorded = Recorded(
            StepGrammars(qwen_engine, [OPENS_HERMES_CALL]), store, settings=settings
        )  # type: ignore[arg-type]
        session = recorded.turn.session
        async with running([sdk_server()], tmp_path / "logs") as servers:
            tools = with_tools(recorded, servers, Answers(Choice.ONCE))
            tools.tools_off |= {("sdk", name) for name in ("environment", "big", "wait", "crash")}
            first = await recorded.reply_to("Please echo hello.")
            assert first.tool_steps and first.stats is not None
            conv_id = session.conversation.id
            assert conv_id is not None
            session.leave()
            session.resumer.wait(60)
            qwen_engine.reset()
            session.open(*session.load(conv_id))
            second = await recorded.reply_to("Thanks.")
    assert second.stats is not None and not second.tool_steps
    assert second.stats.prompt_reused >= first.stats.prompt_tokens, (second.stats, first.stats)
