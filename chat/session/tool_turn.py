"""A reply with tools: the conversation's tools (which servers and tools are
on, who is asked before a call) and the run of one reply through the tool
loop (chat.session.tool_loop), reported as events. No Textual.

`Turn` (chat.session.turn) starts a `ToolTurn` in place of a plain reply
stream when the conversation has tools on, a server offers some, and the
model can call them (`ModelInfo.tool_calls`). The tool turn reports the
reply's text in frame-sized batches, as the reply stream does, and each
step of the loop as its own event: the user being asked, a call started, a
call's result, a model reply that ended with calls. Stopping it (Esc)
stops whatever step it is at; what was done stays.

Tools are on by default when servers are configured, as in Claude Desktop
and crush: configuring a server is the user's way of asking for its tools,
and nothing runs without the permission question anyway. The choice, and
the servers and tools turned off, hold for the conversation being held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from chat.conversations.conversation import Message
from chat.conversations.tool_switches import ToolSwitches
from chat.engine.protocol import ChatMessage, Engine, Finished, PromptProgress
from chat.engine.reasoning.splitter import (
    ReplyPart,
    ThinkingSplitter,
    inside_thought,
    token_parts,
)
from chat.engine.tool_calls.calls import ToolDefinition
from chat.runtime.frame_pacing import FASTEST_FRAME_S
from chat.session.tool_loop import (
    Ask,
    CallRecord,
    LoopEvent,
    OfferedTool,
    PermissionRequest,
    Step,
    ToolCaller,
    ToolLoop,
    ToolLoopOutcome,
    ToolLoopSettings,
    offered_tools,
)
from chat.settings.schema import SamplingSettings
from chat.tools.permissions import Choice, Permissions
from chat.tools.status import ServerState


async def _refuse(request: PermissionRequest) -> Choice:
    """Whoever holds the tools has not said how to ask: nothing runs."""
    return Choice.REFUSE


@dataclass
class ConversationTools:
    """The tools of the conversation being held."""

    caller: ToolCaller
    """The tool servers (chat.tools.manager.ToolServers)."""
    permissions: Permissions
    settings: ToolLoopSettings = field(default_factory=ToolLoopSettings)
    ask: Ask = _refuse
    """Asks the user before a call no permission covers (the UI's dialog)."""
    on: bool = True
    """Tools offered in this conversation (see `reset`)."""
    servers_off: set[str] = field(default_factory=set)
    tools_off: set[tuple[str, str]] = field(default_factory=set)
    """(server, tool) turned off in this conversation."""

    def __post_init__(self) -> None:
        self._offered: tuple[object, list[OfferedTool], list[str], tuple[object, ...]] | None = None
        self.reset()

    @property
    def configured(self) -> bool:
        return bool(self.caller.servers)

    def reset(self) -> None:
        """Another conversation: tools on when a server is configured, none off."""
        self.restore(ToolSwitches())

    def restore(self, switches: ToolSwitches) -> None:
        """Another conversation, with what it turned off (`Conversation.tool_switches`)."""
        self.on = self.configured and not switches.all_off
        self.servers_off.clear()
        self.servers_off.update(switches.servers)
        self.tools_off.clear()
        self.tools_off.update(switches.tools)

    def switches(self) -> ToolSwitches:
        """What is off now, as the conversation keeps it."""
        return ToolSwitches(
            all_off=self.configured and not self.on,
            servers=frozenset(self.servers_off),
            tools=frozenset(self.tools_off),
        )

    def enabled(self, server: str, tool: str) -> bool:
        """Whether `tool` of `server` is on in this conversation."""
        return server not in self.servers_off and (server, tool) not in self.tools_off

    def offered(self, problems: list[str] | None = None) -> list[OfferedTool]:
        """What the model is offered now: none when tools are off. `problems`
        gets why a tool is left out (its schema makes no grammar)."""
        if not self.on:
            return []
        servers = self.caller.servers
        # Every plan of the meter asks (each keystroke): a grammar is made from
        # each schema only when a server's state or a switch changed. The
        # statuses are kept with the key, so their ids stay theirs.
        key = (
            tuple((name, id(status)) for name, status in servers.items()),
            frozenset(self.servers_off),
            frozenset(self.tools_off),
        )
        if self._offered is None or self._offered[0] != key:
            found: list[str] = []
            offered = offered_tools(servers, self.enabled, found)
            self._offered = (key, offered, found, tuple(servers.values()))
        if problems is not None:
            problems.extend(self._offered[2])
        return list(self._offered[1])

    def definitions(self) -> list[ToolDefinition]:
        """The offered tools as the template renders them."""
        return [offered.definition for offered in self.offered()]

    @property
    def starting(self) -> bool:
        """A server is still starting (its tools are not offered yet)."""
        return any(s.state is ServerState.STARTING for s in self.caller.servers.values())


# What a tool turn reports (besides the reply's text, through `Turn`'s TurnText).


@dataclass(frozen=True)
class ToolCallAsked:
    """The user is asked whether the call may run (the UI shows its dialog)."""

    reply: Message
    request: PermissionRequest


@dataclass(frozen=True)
class ToolCallStarted:
    """The call runs (allowed). `step`: the model reply that made it, from 1."""

    reply: Message
    request: PermissionRequest
    step: int


@dataclass(frozen=True)
class ToolCallEnded:
    """A call ended: ran, refused, failed or cancelled; `record.result` is
    what the model reads (untrusted text)."""

    reply: Message
    record: CallRecord
    step: int


@dataclass(frozen=True)
class ToolStepEnded:
    """A model reply of the turn ended with calls: `text` is what it said
    before them (already streamed as the reply's text, to be moved above the
    calls), `finished` its figures (the KV cache reused, evaluated, first
    token)."""

    reply: Message
    step: int
    finished: Finished
    text: str


@dataclass(frozen=True)
class ToolTurnStopped:
    """The loop ended before the model answered (`problem`, one sentence):
    the most steps were reached, or a step failed. What was done is kept."""

    reply: Message
    problem: str


ToolTurnEvent = ToolCallAsked | ToolCallStarted | ToolCallEnded | ToolStepEnded | ToolTurnStopped


class ToolTurn:
    """One reply through the tool loop, in the caller's event loop."""

    def __init__(
        self,
        engine: Engine,
        tools: ConversationTools,
        offered: Sequence[OfferedTool],
        sampling: SamplingSettings,
        reply: Message,
        report: Callable[[ToolTurnEvent], object],
        on_text: Callable[[str, int, str, int], object],
        on_progress: Callable[[PromptProgress], object] = lambda progress: None,
        frame_s: float = FASTEST_FRAME_S,
    ) -> None:
        """`report` gets each step's events, `on_text` the reply's text, its
        tokens (a call's own tokens counted with no text), and a reasoning
        model's thinking with its tokens, at most once a frame, `on_progress`
        how far each step's prompt has been read; all on the event loop `run`
        is awaited in."""
        self.reply = reply
        self._report = report
        self._on_text = on_text
        self._on_progress = on_progress
        self._frame_s = frame_s
        self._reasoning = engine.info.reasoning
        self._splitter = self._new_splitter()
        self._pending: list[str] = []
        self._pending_thinking: list[str] = []
        self._pending_tokens = 0
        self._pending_thinking_tokens = 0
        self._flush_at: asyncio.TimerHandle | None = None
        self._step = 1
        self._step_text: list[str] = []
        self._step_thinking: list[str] = []
        self._steps: list[Step] = []
        """The steps that called so far, with the calls that ended."""
        self.shown: list[tuple[str, str]] = []
        """Each step that called: its text and its thinking, as they were
        split while it streamed (for `tool_history.tool_steps_of`)."""
        self.loop = ToolLoop(
            engine,
            tools.caller,
            tools.permissions,
            offered,
            tools.ask,
            sampling=sampling,
            settings=tools.settings,
            on_event=self._loop_event,
        )

    @property
    def text(self) -> str:
        """The current step's answer so far (the last step's, once the turn
        ended: the reply's answer)."""
        return "".join(self._step_text)

    @property
    def thinking(self) -> str:
        """The current step's thinking so far, apart from its answer."""
        return "".join(self._step_thinking)

    @property
    def in_thought(self) -> bool:
        """The current step is inside its thinking now (the last step's, once
        the turn ended: `inside_thought`)."""
        return inside_thought(self._splitter, self.thinking, bool(self.text))

    def _new_splitter(self) -> ThinkingSplitter | None:
        """Each step is a reply of its own: its thinking comes first."""
        reasoning = self._reasoning
        if reasoning is None:
            return None
        return ThinkingSplitter(reasoning.markers, reasoning.prompt_opens_block)

    def _take(self, parts: Sequence[ReplyPart]) -> None:
        for part in parts:
            if part.kind == "answer":
                self._pending.append(part.text)
                self._step_text.append(part.text)
            else:
                self._pending_thinking.append(part.text)
                self._step_thinking.append(part.text)
                self._pending_thinking_tokens += part.tokens

    def so_far(self) -> ToolLoopOutcome:
        """The steps done so far, each with the calls that ended, as the
        loop's outcome would have them (for `tool_history.tool_steps_of`)."""
        steps = [step for step in self._steps if step.calls]
        added: list[ChatMessage] = [
            {
                "role": "assistant",
                "content": step.finished.text,
                "tool_calls": [call.for_template() for call in step.finished.tool_calls],
            }
            for step in steps
        ]
        return ToolLoopOutcome("cancelled", steps, added)

    def cancel(self) -> None:
        self.loop.cancel()

    async def run(self, messages: Sequence[ChatMessage]) -> ToolLoopOutcome:
        try:
            return await self.loop.run(messages)
        finally:
            self._flush()

    def _loop_event(self, event: LoopEvent) -> None:
        if event.kind == "progress" and event.progress is not None:
            self._on_progress(event.progress)
            return
        if event.kind == "text" and event.token is not None:
            token = event.token
            if not token.tool_call:  # the call's JSON shows in its own block
                self._take(token_parts(token, self._splitter))
            self._pending_tokens += 1 if token.token_id >= 0 else 0
            if self._flush_at is None:
                loop = asyncio.get_running_loop()
                self._flush_at = loop.call_later(self._frame_s, self._flush)
            return
        if event.kind == "step" and self._splitter is not None:
            self._take(self._splitter.flush())
        self._flush()
        if event.kind == "step" and event.finished is not None:
            finished = event.finished
            if finished.tool_calls:
                self._steps.append(Step(finished))
                self.shown.append((self.text, self.thinking))
                self._report(ToolStepEnded(self.reply, self._step, finished, self.text))
                self._step += 1
                self._step_text, self._step_thinking = [], []
                self._splitter = self._new_splitter()
        elif event.kind == "ask" and event.request is not None:
            self._report(ToolCallAsked(self.reply, event.request))
        elif event.kind == "call" and event.request is not None:
            self._report(ToolCallStarted(self.reply, event.request, self._step - 1))
        elif event.kind == "result" and event.record is not None:
            if self._steps:
                last = self._steps[-1]
                self._steps[-1] = Step(last.finished, (*last.calls, event.record))
            self._report(ToolCallEnded(self.reply, event.record, self._step - 1))

    def _flush(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        if self._pending or self._pending_tokens or self._pending_thinking:
            text, thinking = "".join(self._pending), "".join(self._pending_thinking)
            tokens, thinking_tokens = self._pending_tokens, self._pending_thinking_tokens
            self._pending, self._pending_thinking = [], []
            self._pending_tokens = self._pending_thinking_tokens = 0
            self._on_text(text, tokens, thinking, thinking_tokens)
