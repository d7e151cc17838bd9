"""A turn with tools: model, call, permission, the call run, its result,
the model again, until it answers or the steps run out.

Plain Python over asyncio, no Textual: the UI and one-shot mode drive it
alike. The engine streams in a worker thread (it blocks); the permission
question and the MCP call are awaited in the caller's loop, so `cancel()`
stops any step: the reply after its current token, the question at once, a
running call by cancelling the request on the server (chat.tools.manager).
What was done before stays in `messages`.

Every step after a call sends the same conversation plus the call and its
result: the engine keeps the longest common prefix of the KV cache, so it
evaluates only those (the figures are in each `Step`). Results are
untrusted text: they go to the model as they are, cut to a token limit
with a note saying so, and whoever draws them sanitises them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from chat.engine.protocol import (
    ChatMessage,
    Engine,
    EngineEvent,
    Finished,
    PromptProgress,
    TokenEvent,
)
from chat.engine.tool_calls.calls import ToolCall, ToolDefinition
from chat.engine.tool_calls.grammar import arguments_problem
from chat.errors import KvchatError, ToolCallError
from chat.settings.schema import SamplingSettings, ToolSettings
from chat.tools.permissions import Choice, Permissions
from chat.tools.results import ToolResult
from chat.tools.status import ServerState, ServerStatus


class ToolCaller(Protocol):
    """What runs the calls: `chat.tools.manager.ToolServers`."""

    @property
    def servers(self) -> Mapping[str, ServerStatus]: ...

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float | None = None
    ) -> ToolResult: ...


@dataclass(frozen=True)
class ToolLoopSettings:
    max_steps: int = 8
    """Model replies in one turn at most (each may call a tool)."""
    result_token_limit: int = 2048
    """A result longer than this, in the model's tokens, is cut (with a note)."""

    @classmethod
    def from_settings(cls, settings: ToolSettings) -> ToolLoopSettings:
        return cls(settings.max_steps, settings.result_token_limit)


@dataclass(frozen=True)
class OfferedTool:
    """A tool as the model sees it (`definition.name`) and where it runs."""

    definition: ToolDefinition
    server: str
    tool: str


def offered_tools(
    servers: Mapping[str, ServerStatus],
    enabled: Callable[[str, str], bool] = lambda s, t: True,
    problems: list[str] | None = None,
) -> list[OfferedTool]:
    """The usable tools of the ready servers, that `enabled(server, tool)`
    lets through. A name two servers share is offered as `SERVER_TOOL`. A
    tool whose schema no grammar can be made from is left out, and why is
    added to `problems`."""
    found = [
        (name, tool)
        for name, status in servers.items()
        if status.state is ServerState.READY
        for tool in status.tools
        if tool.usable and enabled(name, tool.name)
    ]
    counts: dict[str, int] = {}
    for _, tool in found:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    offered = []
    for server, tool in found:
        definition = ToolDefinition(
            tool.name if counts[tool.name] == 1 else f"{server}_{tool.name}",
            tool.description,
            dict(tool.input_schema),
        )
        problem = arguments_problem(definition)
        if problem is not None:
            if problems is not None:
                problems.append(problem)
            continue
        offered.append(OfferedTool(definition, server, tool.name))
    return offered


@dataclass(frozen=True)
class PermissionRequest:
    """What the user is asked about: the tool, its server, the full arguments."""

    server: str
    tool: str
    arguments: Mapping[str, Any]
    call: ToolCall


Ask = Callable[[PermissionRequest], Awaitable[Choice]]


@dataclass(frozen=True)
class CallRecord:
    """One call and what came of it."""

    call: ToolCall
    server: str
    tool: str
    outcome: Literal["ran", "refused", "failed", "cancelled"]
    result: str
    """The text the model reads (cut, with the note, when it was too long)."""
    duration_s: float = 0.0
    """The call's own time, from the request to its result."""
    is_error: bool = False
    cut: bool = False
    result_tokens: int = 0


@dataclass(frozen=True)
class Step:
    """One model reply of the turn, and the calls it made."""

    finished: Finished
    calls: tuple[CallRecord, ...] = ()


@dataclass
class ToolLoopOutcome:
    end: Literal["answered", "max_steps", "cancelled", "failed"] = "answered"
    steps: list[Step] = field(default_factory=list)
    added: list[ChatMessage] = field(default_factory=list)
    """The messages the turn added: replies with calls, results, the answer."""
    problem: str | None = None
    """Why it ended early ("failed", "max_steps"), in one sentence."""


@dataclass(frozen=True)
class LoopEvent:
    """What the loop reports as it goes: `kind` and what it carries.

    "progress": a reply's prompt is being read (`progress`); "text": a
    reply's `TokenEvent` (`token`); "step": a reply ended (`finished`);
    "ask": the user is being asked (`request`); "call": a call starts
    (`call`, `server`, `tool`); "result": a call ended (`record`)."""

    kind: Literal["progress", "text", "step", "ask", "call", "result"]
    progress: PromptProgress | None = None
    token: TokenEvent | None = None
    finished: Finished | None = None
    request: PermissionRequest | None = None
    record: CallRecord | None = None


REFUSED = "The user refused to run this tool call."
CANCELLED = "The call was cancelled by the user."


class ToolLoop:
    def __init__(
        self,
        engine: Engine,
        caller: ToolCaller,
        permissions: Permissions,
        tools: Sequence[OfferedTool],
        ask: Ask,
        *,
        sampling: SamplingSettings,
        settings: ToolLoopSettings | None = None,
        count_tokens: Callable[[str], int] | None = None,
        on_event: Callable[[LoopEvent], None] | None = None,
    ) -> None:
        """`ask` is awaited before a call no permission covers; `count_tokens`
        counts a result's tokens (default: the engine's, where it has one)."""
        self._engine = engine
        self._caller = caller
        self._permissions = permissions
        self._tools = {offered.definition.name: offered for offered in tools}
        self._ask = ask
        self._sampling = sampling
        self.settings = settings or ToolLoopSettings()
        counter = count_tokens or getattr(engine, "count_text_tokens", None)
        self._count = counter or (lambda text: len(text.encode("utf-8")) // 3 + 1)
        self._on_event = on_event or (lambda event: None)
        self._cancel = threading.Event()
        self._waiting: asyncio.Future[Any] | None = None

    def cancel(self) -> None:
        """Stop the turn at whatever step it is: the reply after its current
        token, the question or the running call at once."""
        self._cancel.set()
        if self._waiting is not None:
            self._waiting.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    async def run(self, messages: Sequence[ChatMessage]) -> ToolLoopOutcome:
        """Run the turn after `messages` (which end with the user's message)."""
        outcome = ToolLoopOutcome()
        history: list[ChatMessage] = list(messages)
        definitions = [offered.definition for offered in self._tools.values()]
        for step_number in range(1, self.settings.max_steps + 1):
            try:
                finished = await self._reply(history, definitions)
            except KvchatError as error:
                outcome.end, outcome.problem = "failed", str(error)
                return outcome
            if not finished.tool_calls or self.cancelled:
                message: ChatMessage = {"role": "assistant", "content": finished.text}
                if finished.token_ids:
                    message["token_ids"] = finished.token_ids
                outcome.added.append(message)
                outcome.steps.append(Step(finished))
                if self.cancelled:
                    outcome.end = "cancelled"
                elif finished.tool_call_error is not None:
                    outcome.end, outcome.problem = "failed", finished.tool_call_error
                return outcome
            reply: ChatMessage = {
                "role": "assistant",
                "content": finished.text,
                "tool_calls": [call.for_template() for call in finished.tool_calls],
            }
            if finished.token_ids:
                reply["token_ids"] = finished.token_ids  # the KV cache holds them
            history.append(reply)
            outcome.added.append(reply)
            records = []
            for call in finished.tool_calls:
                record = await self._run_call(call)
                records.append(record)
                result: ChatMessage = {
                    "role": "tool",
                    "content": record.result,
                    "tool_call_id": call.id,
                    "name": call.name,
                }
                history.append(result)
                outcome.added.append(result)
            outcome.steps.append(Step(finished, tuple(records)))
            if self.cancelled:
                outcome.end = "cancelled"
                return outcome
            if step_number == self.settings.max_steps:
                outcome.end = "max_steps"
                outcome.problem = (
                    f"The model was still calling tools after {self.settings.max_steps} "
                    "steps, the most a turn may take (a setting): the turn was stopped."
                )
        return outcome

    async def _reply(
        self, history: Sequence[ChatMessage], definitions: Sequence[ToolDefinition]
    ) -> Finished:
        """One model reply, streamed in a worker thread; its prompt's reading
        and its text are reported as they come."""
        loop = asyncio.get_running_loop()

        def stream() -> Finished:
            events: Any = self._engine.stream_reply(
                history, self._sampling, self._cancel, tools=definitions
            )
            last: EngineEvent | None = None
            for event in events:
                last = event
                if isinstance(event, TokenEvent):
                    loop.call_soon_threadsafe(self._on_event, LoopEvent("text", token=event))
                elif isinstance(event, PromptProgress):  # the tools' definitions make it long
                    loop.call_soon_threadsafe(self._on_event, LoopEvent("progress", progress=event))
            assert isinstance(last, Finished)
            return last

        finished = await asyncio.to_thread(stream)
        self._on_event(LoopEvent("step", finished=finished))
        return finished

    async def _run_call(self, call: ToolCall) -> CallRecord:
        offered = self._tools.get(call.name)
        if offered is None:
            return CallRecord(
                call,
                "",
                call.name,
                "failed",
                f"There is no tool named {call.name!r}.",
                is_error=True,
            )
        server, tool = offered.server, offered.tool
        if self._permissions.allowed(server, tool) is None:
            request = PermissionRequest(server, tool, call.arguments, call)
            self._on_event(LoopEvent("ask", request=request))
            try:
                choice = await self._wait(self._ask(request))
            except asyncio.CancelledError:
                if not self.cancelled:
                    raise
                return self._report(CallRecord(call, server, tool, "cancelled", CANCELLED))
            if choice is Choice.REFUSE:
                return self._report(CallRecord(call, server, tool, "refused", REFUSED))
            # When the file cannot be written the choice still holds for this
            # run; the file's problem is `Permissions.problem`'s to tell.
            with contextlib.suppress(KvchatError):
                self._permissions.record(choice, server, tool)
        request = PermissionRequest(server, tool, call.arguments, call)
        self._on_event(LoopEvent("call", request=request))
        started = time.perf_counter()
        try:
            result = await self._wait(self._caller.call_tool(server, tool, call.arguments))
        except asyncio.CancelledError:
            if not self.cancelled:
                raise
            took = time.perf_counter() - started
            return self._report(CallRecord(call, server, tool, "cancelled", CANCELLED, took))
        except ToolCallError as error:
            took = time.perf_counter() - started
            return self._report(
                CallRecord(call, server, tool, "failed", f"Error: {error}", took, is_error=True)
            )
        took = time.perf_counter() - started
        text, tokens, cut = self._fit(result.text)
        return self._report(
            CallRecord(
                call, server, tool, "ran", text, took, result.is_error, cut or result.cut, tokens
            )
        )

    async def _wait(self, awaitable: Awaitable[Any]) -> Any:
        """Await a question or a call so that `cancel()` can cancel it."""
        future = asyncio.ensure_future(awaitable)
        self._waiting = future
        try:
            if self.cancelled:
                future.cancel()
            return await future
        finally:
            self._waiting = None

    def _report(self, record: CallRecord) -> CallRecord:
        self._on_event(LoopEvent("result", record=record))
        return record

    def _fit(self, text: str) -> tuple[str, int, bool]:
        """`text` cut to the result token limit, with a note when it is cut:
        (text, its tokens, whether it was cut)."""
        limit = self.settings.result_token_limit
        tokens = self._count(text)
        if tokens <= limit:
            return text, tokens, False
        note = (
            f"\n[kvchat cut this result: it was {tokens:,} tokens, "
            f"more than the limit of {limit:,}; the start is above]"
        )
        room = max(0, limit - self._count(note))
        # The longest start of the text that fits: a binary search on characters.
        low, high = 0, min(len(text), room * 16)
        while low < high:
            middle = (low + high + 1) // 2
            if self._count(text[:middle]) <= room:
                low = middle
            else:
                high = middle - 1
        kept = text[:low] + note
        return kept, self._count(kept), True
