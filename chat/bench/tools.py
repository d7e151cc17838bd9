"""Tool calls (issue 30): a five-step tool loop, the cost of a call, and
startup with tool servers configured.

The loop is the demo model behind a copy of Qwen 2.5's tool-calling chat
template (written with the `gguf` package, as llama.cpp's
`gguf-new-metadata` does); a grammar makes its own tokens open a call for
four steps and answer at the fifth, and the engine's grammar made from the
tool's schema samples each call's arguments. Each step after a call sends
the conversation again plus the call and its result, so it should evaluate
only those (the KV cache keeps the rest) and its first token should come
no later than the first step's, which evaluated the whole prompt.

A call's overhead is kvchat's path (its tool server manager, over stdio)
against a bare `mcp` SDK `ClientSession` calling the same server program,
alternately, in the same run: the difference is what kvchat adds beyond the
server's own time and the SDK's transport.

Startup with three tool servers configured is `chat` in a pseudo-terminal
(chat.bench.startup) with an `mcp.json` of three, against none: the servers
start in the background after the first frame, so it should not move.
The targets are docs/performance.md's ("Targets")."""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chat.bench.rows import Options, Row
from chat.bench.startup import installed_python_env, launch
from chat.bench.workload import quiet_load
from chat.engine.llama import LlamaEngine
from chat.engine.tool_calls.calls import ToolDefinition
from chat.models.template_copy import with_chat_template
from chat.paths import CONFIG_DIR_ENV
from chat.session.tool_loop import OfferedTool, ToolLoop, ToolLoopSettings
from chat.settings.schema import ModelSettings, SamplingSettings
from chat.tools.config import StdioServerConfig
from chat.tools.manager import ToolServers
from chat.tools.permissions import Choice, Grant, Permissions
from chat.tools.status import ServerState

HERE = Path(__file__).parent
SERVER_PROGRAM = HERE / "tool_server.py"
QWEN25_TEMPLATE = HERE / "qwen2.5.jinja"
"""Qwen2.5-Instruct's chat template: tools in the system message, calls as
`<tool_call>{json}</tool_call>`, results in `<tool_response>`."""

STEPS = 5
OPENS_CALL = 'root ::= [A-Z] [a-z ]{3,24} "\\n<tool_call>" [^<]*'
"""A few words, then a call's opener (the engine's grammar does the rest)."""
ANSWER = "root ::= [A-Z] [a-z ,.]{5,40}"
SAMPLING = SamplingSettings(temperature=0.0, max_tokens=80, seed=1)
QUESTION: list[Any] = [{"role": "user", "content": "Please echo hello a few times, then tell me."}]
ECHO = OfferedTool(
    ToolDefinition(
        "echo",
        "Say the text back.",
        {
            "type": "object",
            "properties": {"text": {"type": "string", "enum": ["hello"]}},
            "required": ["text"],
        },
    ),
    "bench",
    "echo",
)
"""The server's tool, offered with a schema that leaves one choice of
arguments, so every step's call (and result) is the same size."""

SLACK_S = 0.05
"""Startup "unchanged": the difference of the medians within this (one
launch varies by more than that on a loaded machine)."""
OVERHEAD_TARGET_MS = 5.0


# --- what the rows say (tested in tests/bench/test_tools.py) -------------------------


@dataclass(frozen=True)
class StepFigures:
    ttft_s: float
    evaluated: int
    """Prompt tokens the step evaluated."""
    new_tokens: int
    """Tokens its prompt has beyond the previous step's (the call and its
    result with the template's text around them); the whole prompt at step 1."""


def ttft_row(steps: list[StepFigures]) -> Row:
    """The slowest later step's first-token time against step 1's. Met when
    no step takes longer than step 1 scaled by the tokens it evaluates (a
    step evaluating fewer tokens may take at most as long)."""
    first, later = steps[0], steps[1:]
    worst = max(step.ttft_s / first.ttft_s for step in later)
    ok = all(
        step.ttft_s <= first.ttft_s * max(1.0, step.evaluated / max(first.evaluated, 1))
        for step in later
    )
    per_step = ", ".join(f"{step.ttft_s * 1000:.0f}" for step in steps)
    return Row(
        f"tool loop: first-token time, worst of steps 2-{len(steps)} / step 1",
        worst,
        "x",
        "≤ 1x, or as the step's tokens",
        ok,
        f"ms per step: {per_step}",
    )


def evaluated_row(steps: list[StepFigures]) -> Row:
    """Tokens a later step evaluated beyond its call and result (the worst
    step): 0 when the KV cache kept everything before them."""
    later = steps[1:]
    beyond = max(max(step.evaluated - step.new_tokens, 0) for step in later)
    pairs = ", ".join(f"{step.evaluated}/{step.new_tokens}" for step in later)
    return Row(
        "tool loop: tokens evaluated per step beyond the call and its result",
        beyond,
        "tokens",
        "0",
        beyond == 0,
        f"steps 2-{len(steps)} evaluated/new: {pairs}; step 1 {steps[0].evaluated}",
    )


def overhead_row(kvchat_s: list[float], sdk_s: list[float]) -> Row:
    """kvchat's call minus the bare SDK's, medians, in milliseconds."""
    kvchat, sdk = statistics.median(kvchat_s), statistics.median(sdk_s)
    overhead_ms = (kvchat - sdk) * 1000
    return Row(
        "tool call: kvchat's overhead over a bare MCP SDK client (stdio)",
        overhead_ms,
        "ms",
        f"≤ {OVERHEAD_TARGET_MS:g} ms",
        overhead_ms <= OVERHEAD_TARGET_MS,
        f"median of {len(kvchat_s)} calls each: kvchat {kvchat * 1000:.2f} ms, "
        f"SDK {sdk * 1000:.2f} ms",
    )


def startup_row(with_servers_s: list[float], without_s: list[float]) -> Row:
    """First frame with three tool servers configured minus with none, medians."""
    servers, none = statistics.median(with_servers_s), statistics.median(without_s)
    difference = servers - none
    return Row(
        "startup to first frame, three tool servers configured - none",
        difference,
        "s",
        f"≤ {SLACK_S:g} s (unchanged)",
        difference <= SLACK_S,
        f"median of {len(without_s)}: {servers:.3f} s with, {none:.3f} s without",
    )


# --- the tool loop -----------------------------------------------------------------


class StepGrammars:
    """The real engine with a grammar per model reply: the demo model calls
    while the grammars say so and answers (ANSWER) once they run out."""

    def __init__(self, engine: LlamaEngine, grammars: list[str]) -> None:
        self.engine = engine
        self.grammars = list(grammars)
        self.info = engine.info
        self.count_text_tokens = engine.count_text_tokens

    def stream_reply(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self.engine.grammar = self.grammars.pop(0) if self.grammars else ANSWER
        try:
            yield from self.engine.stream_reply(*args, **kwargs)
        finally:
            self.engine.grammar = None


async def _never_asked(request: Any) -> Choice:
    raise AssertionError("the bench allows its server beforehand")


def bench_server(name: str = "bench") -> StdioServerConfig:
    return StdioServerConfig(name, sys.executable, (str(SERVER_PROGRAM),))


async def started(servers: ToolServers) -> None:
    servers.start()
    deadline = time.monotonic() + 120
    while any(s.state is ServerState.STARTING for s in servers.servers.values()):
        if time.monotonic() > deadline:
            raise TimeoutError("the bench's tool server did not start in 120 s")
        await asyncio.sleep(0.02)
    problems = [s for s in servers.servers.values() if s.state is not ServerState.READY]
    if problems:
        raise RuntimeError(f"the bench's tool server did not start: {problems[0]}")


async def loop_steps(engine: LlamaEngine, servers: ToolServers) -> list[StepFigures]:
    """One five-step turn from an empty KV cache: each step's figures."""
    engine.reset()
    loop = ToolLoop(
        StepGrammars(engine, [OPENS_CALL] * (STEPS - 1) + [ANSWER]),  # type: ignore[arg-type]
        servers,
        Permissions(None, [Grant("bench")]),
        [ECHO],
        _never_asked,
        sampling=SAMPLING,
        settings=ToolLoopSettings(max_steps=STEPS),
    )
    outcome = await loop.run(QUESTION)
    if outcome.end != "answered" or len(outcome.steps) != STEPS:
        raise RuntimeError(
            f"the bench's tool loop ended {outcome.end} after {len(outcome.steps)} steps: "
            f"{outcome.problem}"
        )
    definitions = [ECHO.definition]
    figures, history, before = [], list(QUESTION), 0
    added = iter(outcome.added)
    for step in outcome.steps:
        size = len(engine.tokenize_chat(history, tools=definitions))
        stats = step.finished.stats
        figures.append(StepFigures(stats.ttft_s, stats.prompt_evaluated, size - before))
        before = size
        history += [next(added) for _ in range(1 + len(step.calls))]
    return figures


def median_steps(rounds: list[list[StepFigures]]) -> list[StepFigures]:
    """Each step's median first-token time over the rounds; its evaluated
    tokens the most of any round (they should not vary)."""
    return [
        StepFigures(
            statistics.median(r[i].ttft_s for r in rounds),
            max(r[i].evaluated for r in rounds),
            max(r[i].new_tokens for r in rounds),
        )
        for i in range(len(rounds[0]))
    ]


# --- a call's overhead ----------------------------------------------------------------


async def call_times(servers: ToolServers, calls: int) -> tuple[list[float], list[float]]:
    """Seconds per echo call through kvchat's manager and through a bare SDK
    session on a second process of the same server, alternately."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parameters = StdioServerParameters(command=sys.executable, args=[str(SERVER_PROGRAM)])
    arguments = {"text": "hello"}
    kvchat: list[float] = []
    sdk: list[float] = []
    with open(Path(tempfile.gettempdir()) / "kvchat-bench-sdk-server.log", "w") as log:
        async with (
            stdio_client(parameters, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for _ in range(5):  # warm both paths up
                await servers.call_tool("bench", "echo", arguments)
                await session.call_tool("echo", arguments)
            for _ in range(calls):
                started_at = time.perf_counter()
                await servers.call_tool("bench", "echo", arguments)
                kvchat.append(time.perf_counter() - started_at)
                started_at = time.perf_counter()
                await session.call_tool("echo", arguments)
                sdk.append(time.perf_counter() - started_at)
    return kvchat, sdk


async def _measure(engine: LlamaEngine, options: Options, log_dir: Path) -> list[Row]:
    servers = ToolServers([bench_server()], log_dir=log_dir)
    try:
        await started(servers)
        rounds = [await loop_steps(engine, servers) for _ in range(1 if options.quick else 3)]
        steps = median_steps(rounds)
        kvchat, sdk = await call_times(servers, 20 if options.quick else 200)
    finally:
        await servers.close()
    return [ttft_row(steps), evaluated_row(steps), overhead_row(kvchat, sdk)]


# --- startup --------------------------------------------------------------------------


def startup_times(options: Options) -> tuple[list[float], list[float]]:
    """Seconds to the first frame with three servers configured and with none,
    launched alternately from one installed-like environment."""
    scratch = Path(tempfile.mkdtemp(prefix="kvchat-bench-tools-"))
    without = installed_python_env(scratch)
    config = scratch / "config-tools"
    config.mkdir()
    entry = {"command": sys.executable, "args": [str(SERVER_PROGRAM)]}
    (config / "mcp.json").write_text(
        json.dumps({"mcpServers": {f"bench{i}": entry for i in range(1, 4)}})
    )
    with_servers = {**without, CONFIG_DIR_ENV: str(config)}
    launch(options.model, with_servers)  # compiles the bytecode, the SDK's too
    times_with, times_without = [], []
    for _ in range(2 if options.quick else 5):
        times_without.append(launch(options.model, without).first_frame_s)
        times_with.append(launch(options.model, with_servers).first_frame_s)
    return times_with, times_without


def tool_rows(options: Options) -> list[Row]:
    folder = Path(tempfile.mkdtemp(prefix="kvchat-bench-tools-"))
    model = with_chat_template(
        options.model, folder / "qwen25-tools.gguf", QWEN25_TEMPLATE.read_text(encoding="utf-8")
    )
    engine = quiet_load(model, ModelSettings(n_ctx=4096), folder / "llama.log")
    try:
        rows = asyncio.run(_measure(engine, options, folder / "logs"))
    finally:
        engine.close()
        shutil.rmtree(folder, ignore_errors=True)  # the model's copy is as large as the model
    return [*rows, startup_row(*startup_times(options))]
