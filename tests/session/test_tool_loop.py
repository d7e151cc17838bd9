"""The tool loop, Textual-free, with real parts: the demo model behind a
real tool-calling template (Qwen 2.5's), and the SDK-written MCP server of
tests/tools started by kvchat's own manager."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.bench.tools import StepGrammars
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.tool_calls.calls import ToolDefinition
from chat.session.tool_loop import (
    CANCELLED,
    REFUSED,
    LoopEvent,
    OfferedTool,
    PermissionRequest,
    ToolLoop,
    ToolLoopSettings,
    offered_tools,
)
from chat.settings.schema import ModelSettings, SamplingSettings
from chat.tools.permissions import Choice, Grant, Permissions
from tests.engine.tool_models import (
    OPENS_HERMES_CALL,
    assert_step_after_a_call_reuses_the_cache,
    qwen25_model,
)
from tests.tools.conftest import running, sdk_server, wait_for_file

GREEDY = SamplingSettings(temperature=0.0, max_tokens=80, seed=1)
QUESTION: list[Any] = [{"role": "user", "content": "Please echo hello, then tell me."}]


def narrowed(tool: str, properties: dict[str, Any]) -> OfferedTool:
    """One tool of the SDK server, offered with a schema that leaves the
    model one choice of arguments (the grammar follows the schema)."""
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return OfferedTool(ToolDefinition(tool, f"The {tool} tool.", schema), "sdk", tool)


ECHO = narrowed("echo", {"text": {"type": "string", "enum": ["hello"]}})


@pytest.fixture(scope="module")
def engine(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaEngine]:
    folder = tmp_path_factory.mktemp("tool-loop")
    loaded = load_engine(qwen25_model(demo_model, folder), ModelSettings(n_ctx=4096), folder / "l")
    yield loaded
    loaded.close()


class Asked:
    """The permission question, answered with `choice` (None: never)."""

    def __init__(self, choice: Choice | None) -> None:
        self.choice = choice
        self.requests: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest) -> Choice:
        self.requests.append(request)
        if self.choice is None:
            await asyncio.Event().wait()
        assert self.choice is not None
        return self.choice


def loop_for(
    engine: LlamaEngine,
    servers: Any,
    tools: list[OfferedTool],
    ask: Asked,
    permissions: Permissions,
    grammars: list[str],
    settings: ToolLoopSettings | None = None,
    events: list[LoopEvent] | None = None,
) -> ToolLoop:
    return ToolLoop(
        StepGrammars(engine, grammars),  # type: ignore[arg-type]
        servers,
        permissions,
        tools,
        ask,
        sampling=GREEDY,
        settings=settings,
        on_event=None if events is None else events.append,
    )


async def test_a_turn_asks_calls_reads_the_result_and_answers(
    engine: LlamaEngine, tmp_path: Path
) -> None:
    ask = Asked(Choice.ONCE)
    events: list[LoopEvent] = []
    permissions = Permissions(tmp_path / "permissions.json")
    async with running([sdk_server()], tmp_path) as servers:
        loop = loop_for(
            engine, servers, [ECHO], ask, permissions, [OPENS_HERMES_CALL], None, events
        )
        outcome = await loop.run(QUESTION)
    assert outcome.end == "answered", outcome.problem
    (request,) = ask.requests  # asked once, with the full arguments
    assert (request.server, request.tool, dict(request.arguments)) == (
        "sdk",
        "echo",
        {"text": "hello"},
    )
    first, second = outcome.steps
    (record,) = first.calls
    assert (record.outcome, record.result) == ("ran", "hello")
    assert record.duration_s > 0
    assert [m["role"] for m in outcome.added] == ["assistant", "tool", "assistant"]
    assert outcome.added[1]["content"] == "hello"
    assert outcome.added[2]["content"] == second.finished.text and second.finished.text
    kinds = [e.kind for e in events if e.kind not in ("text", "progress")]
    assert kinds == ["step", "ask", "call", "result", "step"]
    # Each step's prompt is read with progress, before the step's text.
    assert next(e.kind for e in events if e.kind != "text") == "progress"
    assert "progress" in [e.kind for e in events[events.index(first_step(events)) :]]
    assert permissions.allowed("sdk", "echo") is None  # once is once
    # The step after the call evaluates only the call and its result: the
    # first prompt is still in the KV cache.
    prompt1, _ = assert_step_after_a_call_reuses_the_cache(
        engine, QUESTION, outcome.added[:2], [ECHO.definition], second.finished.stats
    )
    assert first.finished.stats.prompt_evaluated >= len(prompt1) - 1  # ~all of it, the first time


async def test_a_refused_call_is_not_run_and_the_model_is_told(
    engine: LlamaEngine, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    wait = narrowed("wait", {"seconds": {"type": "number", "enum": [1]}})
    ask = Asked(Choice.REFUSE)
    async with running([sdk_server("sdk", "--marks", str(marks))], tmp_path) as servers:
        loop = loop_for(engine, servers, [wait], ask, Permissions(None), [OPENS_HERMES_CALL])
        outcome = await loop.run(QUESTION)
    assert outcome.end == "answered"
    assert outcome.steps[0].calls[0].outcome == "refused"
    assert outcome.added[1] == {
        "role": "tool",
        "content": REFUSED,
        "tool_call_id": outcome.steps[0].finished.tool_calls[0].id,
        "name": "wait",
    }
    assert not (marks / "started").exists()


async def test_always_for_this_tool_is_saved_and_not_asked_again(
    engine: LlamaEngine, tmp_path: Path
) -> None:
    file = tmp_path / "permissions.json"
    ask = Asked(Choice.TOOL)
    async with running([sdk_server()], tmp_path) as servers:
        loop = loop_for(
            engine, servers, [ECHO], ask, Permissions(file), [OPENS_HERMES_CALL, OPENS_HERMES_CALL]
        )
        outcome = await loop.run(QUESTION)
    assert len(ask.requests) == 1  # the second call ran without asking
    assert [s.calls[0].outcome for s in outcome.steps[:2]] == ["ran", "ran"]
    assert Permissions(file).lasting() == [Grant("sdk", "echo")]


async def test_esc_during_a_running_call_cancels_it_on_the_server(
    engine: LlamaEngine, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    wait = narrowed("wait", {"seconds": {"type": "number", "enum": [60]}})
    permissions = Permissions(None, [Grant("sdk", "wait")])  # allowed beforehand
    async with running([sdk_server("sdk", "--marks", str(marks))], tmp_path) as servers:
        loop = loop_for(engine, servers, [wait], Asked(None), permissions, [OPENS_HERMES_CALL])
        task = asyncio.create_task(loop.run(QUESTION))
        await wait_for_file(marks / "started", timeout=120)
        loop.cancel()
        outcome = await asyncio.wait_for(task, 30)
        await wait_for_file(marks / "cancelled")  # the request was cancelled on the server
    assert outcome.end == "cancelled"
    (record,) = outcome.steps[0].calls
    assert (record.outcome, record.result) == ("cancelled", CANCELLED)
    assert record.duration_s < 60
    # What was done is kept: the call and its (cancelled) result.
    assert [m["role"] for m in outcome.added] == ["assistant", "tool"]


async def test_esc_while_the_user_is_asked(engine: LlamaEngine, tmp_path: Path) -> None:
    ask = Asked(None)
    async with running([sdk_server()], tmp_path) as servers:
        loop = loop_for(engine, servers, [ECHO], ask, Permissions(None), [OPENS_HERMES_CALL])
        task = asyncio.create_task(loop.run(QUESTION))
        while not ask.requests:
            await asyncio.sleep(0.02)
        loop.cancel()
        outcome = await asyncio.wait_for(task, 30)
    assert outcome.end == "cancelled"
    assert outcome.steps[0].calls[0].outcome == "cancelled"


async def test_a_long_result_is_cut_to_the_token_limit_with_a_note(
    engine: LlamaEngine, tmp_path: Path
) -> None:
    big = narrowed("big", {"size": {"type": "integer", "enum": [100000]}})
    permissions = Permissions(None, [Grant("sdk")])
    settings = ToolLoopSettings(result_token_limit=64)
    async with running([sdk_server()], tmp_path) as servers:
        loop = loop_for(
            engine, servers, [big], Asked(None), permissions, [OPENS_HERMES_CALL], settings
        )
        outcome = await loop.run(QUESTION)
    record = outcome.steps[0].calls[0]
    assert record.cut and record.outcome == "ran"
    assert record.result_tokens <= 64
    assert engine.count_text_tokens(record.result) <= 64
    assert "[kvchat cut this result: it was" in record.result
    assert record.result.startswith("xxxx")


async def test_the_turn_stops_after_the_most_steps(engine: LlamaEngine, tmp_path: Path) -> None:
    permissions = Permissions(None, [Grant("sdk")])
    settings = ToolLoopSettings(max_steps=2)
    async with running([sdk_server()], tmp_path) as servers:
        loop = loop_for(
            engine, servers, [ECHO], Asked(None), permissions, [OPENS_HERMES_CALL] * 3, settings
        )
        outcome = await loop.run(QUESTION)
    assert outcome.end == "max_steps"
    assert outcome.problem is not None and "2 steps" in outcome.problem
    assert len(outcome.steps) == 2


async def test_a_failed_call_is_a_result_the_model_reads(
    engine: LlamaEngine, tmp_path: Path
) -> None:
    crash = narrowed("crash", {"code": {"type": "integer", "enum": [3]}})
    permissions = Permissions(None, [Grant("sdk")])
    async with running([sdk_server()], tmp_path) as servers:
        loop = loop_for(engine, servers, [crash], Asked(None), permissions, [OPENS_HERMES_CALL])
        outcome = await loop.run(QUESTION)
    record = outcome.steps[0].calls[0]
    assert record.outcome == "failed" and record.is_error
    assert "exited with code 3" in record.result
    assert outcome.end == "answered"  # the conversation goes on


async def test_offered_tools_come_from_ready_servers_and_clashes_are_renamed(
    tmp_path: Path,
) -> None:
    async with running([sdk_server("a"), sdk_server("b")], tmp_path) as servers:
        offered = offered_tools(servers.servers, lambda server, tool: tool == "echo")
    assert sorted(o.definition.name for o in offered) == ["a_echo", "b_echo"]
    assert {(o.server, o.tool) for o in offered} == {("a", "echo"), ("b", "echo")}
    assert json.dumps(offered[0].definition.for_template())  # plain JSON for the template


def first_step(events: list[LoopEvent]) -> LoopEvent:
    return next(event for event in events if event.kind == "step")
