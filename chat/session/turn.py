"""The turn: from a message sent to its reply kept, without Textual.

`Turn` owns what happens between the user's Enter and the reply being saved
whole: the plan the message is sent with (or the problem that keeps it in the
box), the message that waits while a model loads, starting a reply (a new
message, an edit sent as a new branch, a regeneration, a continuation), the
reply's stream (chat.session.reply_stream), stopping it and being told once
it has stopped, when the reply so far is saved, and the work done ahead while
the user pauses (prefill, and re-evaluating a reply so that the same seed
gives the same next reply).

What happens is reported as events, one callback for all of them, called on
the event loop the turn was started from (the reply's thread hands its events
over with `call_soon_threadsafe`): the chat screen turns them into views,
status and notices; a test reads them as they come. The conversation itself
lives in the `ChatSession`; the turn changes it only through the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal, cast

from chat.conversations.attachments import Attachment, prompt_text
from chat.conversations.conversation import Message
from chat.engine.protocol import ChatMessage, Engine, Finished, PromptProgress
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import KvchatError
from chat.runtime.background import call_soon, in_thread, start_thread
from chat.runtime.frame_pacing import FramePacer
from chat.runtime.model_loader import ModelLoader
from chat.session.chat_session import ChatSession
from chat.session.context_window import WindowPlan
from chat.session.draft_attachments import DraftAttachments
from chat.session.reply_stream import ReplyChunk, ReplyEnded, ReplyEvent, ReplyFailed, ReplyStream
from chat.session.tool_history import answer_of, tool_steps_of
from chat.session.tool_loop import OfferedTool, ToolLoopOutcome
from chat.session.tool_turn import (
    ConversationTools,
    ToolCallEnded,
    ToolTurn,
    ToolTurnEvent,
    ToolTurnStopped,
)

PREFILL_PAUSE_S = 0.5
"""After this pause in typing, the message is evaluated ahead (Engine.prefill):
sent unchanged, its reply starts at once. Typing leaves about 0.2 s between
keys; a longer pause usually means the text is read over."""

BUSY = "Wait for the reply to finish, or press Esc to stop it."


# What the turn reports.


StartKind = Literal["new", "regenerate", "answer", "continue"]
"""Why a reply starts: a message sent (or an edit of one), a reply regenerated,
the last message (the user's) answered, or the last reply continued."""


@dataclass(frozen=True)
class TurnStarted:
    """A reply starts streaming into `reply`. `shown`: the branch shown as the
    reply starts (the user's new message last, if there is one; never a new
    reply itself): the view follows it, then shows the reply. `kind`
    "continue": `reply` is the last message, cut short, and goes on."""

    reply: Message
    shown: tuple[Message, ...]
    plan: WindowPlan
    kind: StartKind = "new"


@dataclass(frozen=True)
class TurnProgress:
    """The prompt of `reply` is being evaluated: how far."""

    reply: Message
    progress: PromptProgress


@dataclass(frozen=True)
class TurnText:
    """New text of `reply`'s answer (already safe to display), how many tokens
    came; `thinking`: new text of its thinking, `thinking_tokens` of `tokens`."""

    reply: Message
    text: str
    tokens: int
    thinking: str = ""
    thinking_tokens: int = 0


@dataclass(frozen=True)
class TurnEnded:
    """`reply` is complete (or was stopped) and saved: its `content`, `thinking`
    and `stats` are what to show. `finished`: the engine's end of this part
    (its `error`: a server connection dropped mid-reply, what came is kept).
    `in_thought`: it ended inside its thinking."""

    reply: Message
    finished: Finished
    continued: bool = False
    in_thought: bool = False


@dataclass(frozen=True)
class TurnCancelled:
    """Stopped while the prompt was evaluated: no reply, and none is kept (the
    user's message is; what was evaluated stays in the KV cache)."""

    reply: Message


@dataclass(frozen=True)
class TurnFailed:
    """No reply: `error` says why. `reply`: its message, dropped (None when it
    was a continuation: the reply stays as it was, `continued`). `taken_back`:
    the user's message, taken out of the conversation so that nothing is lost
    (the prompt did not fit, or the server failed before any text): it goes
    back into the box."""

    reply: Message
    error: str
    continued: bool = False
    taken_back: Message | None = None


@dataclass(frozen=True)
class MessageWaiting:
    """`text` waits for the model that is loading; sent once it is ready."""

    text: str


@dataclass(frozen=True)
class WaitingOver:
    """The message that waited for the model is no longer waiting: sent, or
    `taken_back` (Esc, the model failed, another conversation); then
    `refused` may say why it could not be sent."""

    text: str
    taken_back: bool
    refused: Refused | None = None


TurnEvent = (
    TurnStarted
    | TurnProgress
    | TurnText
    | TurnEnded
    | TurnCancelled
    | TurnFailed
    | MessageWaiting
    | WaitingOver
    | ToolTurnEvent
)


@dataclass(frozen=True)
class Refused:
    """Why nothing was sent (the text stays where it is), as the user is told."""

    text: str
    severity: str = "error"
    title: str = ""
    timeout: float | None = None


# The turn.


class Turn:
    def __init__(
        self,
        session: ChatSession,
        models: ModelLoader,
        listener: Callable[[TurnEvent], object] = lambda event: None,
        draft: DraftAttachments | None = None,
    ) -> None:
        """`listener` is called with each event, on the event loop that started
        the reply (or called the method that caused the event)."""
        self.session = session
        self.listener = listener
        self.draft = draft if draft is not None else DraftAttachments()
        """The files attached to the message being written (chat.session.draft_attachments)."""
        self.typed: Callable[[], str] = lambda: ""
        """The text being written (the prompt box's): what a prefill evaluates."""
        self.editing: Callable[[], Message | None] = lambda: None
        """The user's message the text being written replaces (an edit, sent as
        a new branch), if it does: the meter and a prefill plan the messages
        before it, as sending the edit will."""
        self._models = models
        self.counting: Callable[[], bool] = lambda: False
        """Whether the conversation's messages are being counted (the meter's):
        until they are, what fits in the window is not known."""
        self._stream: ReplyStream | None = None
        self._reply: Message | None = None
        self._continuing = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._pacer = FramePacer()
        self._waiting: str | None = None
        self._prefill: asyncio.TimerHandle | None = None
        self._rebatch: asyncio.Future[None] | None = None
        """The reply being evaluated again in the background (`_ended`)."""
        self._prefill_after_rebatch = False
        """A prefill came during the rebatch (the engine was busy with it): it
        runs once the rebatch ends."""
        self.tools: ConversationTools | None = None
        """The conversation's tools (chat.session.tool_turn); None: no tools at all."""
        self._tool_turn: ToolTurn | None = None
        self._tool_task: asyncio.Task[None] | None = None
        self._closed = False
        """The app has ended the turn (`close`): what a reply reports is dropped."""
        session.tool_definitions = self._offered_definitions

    @property
    def generating(self) -> bool:
        """A reply is being generated (until its end has been kept)."""
        return self._reply is not None

    @property
    def reply_text(self) -> str | None:
        """The reply being generated, so far (None when none is)."""
        if self._tool_turn is not None:
            return self._tool_turn.text
        return self._stream.text if self._stream is not None else None

    @property
    def prefill_pending(self) -> bool:
        """A prefill waits for the pause in typing to end (`schedule_prefill`)."""
        return self._prefill is not None

    @property
    def waiting(self) -> str | None:
        """The message waiting for the model to load, if one does."""
        return self._waiting

    async def stopped(self) -> None:
        """Return once no reply is being generated (its end kept and saved)."""
        await self._idle.wait()

    async def rebatched(self) -> None:
        """Return once the last reply's tokens are evaluated again in batches,
        where they are (a repeatable reply's, in the background after it:
        `_start_rebatch`). What is sent before that evaluates them again, by
        design: the same seed then gives the same reply warm and from scratch."""
        rebatch = self._rebatch
        if rebatch is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(rebatch)

    # Sending.

    def send(self, text: str) -> Refused | None:
        """Send the user's message with the draft's files: it joins the
        conversation, is saved, and its reply starts; while a model loads, it
        waits for it (`MessageWaiting`). None when sent or waiting; else why
        not (nothing changed: the text stays in the box)."""
        return self._submit(text, None)

    def send_edit(self, original: Message, text: str) -> Refused | None:
        """Send `text` as a new branch beside the user's message `original` (it
        is kept as an alternative). As `send` otherwise."""
        return self._submit(text, original)

    def _submit(self, text: str, original: Message | None) -> Refused | None:
        if self.generating:
            return Refused(
                "A reply is still being generated. Press Esc to stop it, or wait; "
                "your text stays in the box.",
                severity="warning",
            )
        if self.session.engine is None:
            if self._models.busy:
                return self.wait_for_model(text)
            return Refused("No model is loaded yet; your text stays in the box.", "warning")
        if self.counting():
            return Refused(
                "Still counting the conversation's tokens, to know what fits in the "
                "window. Press Enter again in a moment; your text stays in the box.",
                severity="warning",
            )
        conversation = self.session.conversation
        if original is not None and not any(m is original for m in conversation.messages):
            return Refused("The message being edited is no longer shown.", severity="warning")
        attached = self.attachments_for(text)
        if isinstance(attached, Refused):
            return attached
        shown = self.session.cut_before(original) if original is not None else None
        plan = self.plan_to_send(prompt_text(text, attached))
        if isinstance(plan, Refused):
            if shown is not None:
                self.session.restore_branch(shown)
            return plan
        self.draft.clear()  # sent: the next message starts with none
        self._send(text, plan, attached)
        return None

    def attachments_for(self, text: str) -> list[Attachment] | Refused:
        """The files a message with `text` is sent with (picked, or named with
        `@`), or why one of them cannot be attached (then nothing is sent)."""
        attached = self.draft.resolve(text)
        if attached.problems:
            return Refused(
                " ".join(attached.problems)
                + " Take the @ off its name to send the name as text; your message "
                "stays in the box.",
                title="Cannot attach",
                timeout=12,
            )
        return attached.attachments

    def prompt_for(self, text: str) -> str:
        """What sending `text` would send the model: the text, then the files
        attached. The meter and the prefill plan it."""
        return prompt_text(text, self.draft.resolve(text).attachments)

    def plan(self, text: str | None) -> WindowPlan | None:
        """`session.plan`; a model server that cannot count (down, answering
        garbage) makes the plan's problem, so nothing is sent and what was
        typed stays in the box."""
        try:
            return self.session.plan(text, before=self.editing() if text is not None else None)
        except KvchatError as error:
            return WindowPlan(0, 0, 0, 0, 0, (), problem=str(error))

    def plan_to_send(self, text: str | None) -> WindowPlan | Refused:
        """How sending `text` (None: a new reply to the conversation as it is)
        would fill the window, or why it cannot be sent."""
        plan = self.plan(text)
        if plan is None:
            return Refused("No model is loaded.", severity="error")
        if plan.problem:
            return Refused(plan.problem, severity="error", timeout=15)
        return plan

    def _send(self, text: str, plan: WindowPlan, attachments: Sequence[Attachment]) -> None:
        self.session.add_user_message(text, plan, attachments)
        self._start_reply(plan)

    # The message that waits for a model.

    def wait_for_model(self, text: str) -> Refused | None:
        """Hold `text` until the model loading now is ready (`send_waiting`)."""
        if self._waiting is not None:
            return Refused(
                "A message is already waiting for the model; Esc takes it back.",
                severity="warning",
            )
        self._waiting = text
        self.listener(MessageWaiting(text))
        return None

    def take_back_waiting(self, refused: Refused | None = None) -> str | None:
        """The waiting message goes back to the user (`refused`: why it was not
        sent); None if none waited."""
        text, self._waiting = self._waiting, None
        if text is not None:
            self.listener(WaitingOver(text, taken_back=True, refused=refused))
        return text

    def send_waiting(self) -> bool:
        """The model is ready: send the waiting message as Enter would have (a
        message that does not fit goes back, with the reason). False if none
        waited or it went back."""
        text = self._waiting
        if text is None:
            return False
        if self.generating:
            self.take_back_waiting(Refused(BUSY, severity="warning"))
            return False
        attached = self.attachments_for(text)
        if isinstance(attached, Refused):
            self.take_back_waiting(attached)
            return False
        plan = self.plan_to_send(prompt_text(text, attached))
        if isinstance(plan, Refused):
            self.take_back_waiting(plan)
            return False
        self._waiting = None
        self.listener(WaitingOver(text, taken_back=False))
        self.draft.picked = []  # sent with it
        self._send(text, plan, attached)
        return True

    # Regenerating and continuing.

    def regenerate(self, selected: Message | None = None) -> Refused | None:
        """A new reply in place of `selected` (else the last reply); the old one
        stays as an alternative. None when started; else why not."""
        if self.generating:
            return Refused(BUSY, severity="warning")
        if self.session.engine is None:
            return Refused("No model is loaded.", severity="warning")
        reply = selected if selected and selected.role == "assistant" else None
        reply = reply or self.session.last_reply()
        if reply is None:
            messages = self.session.conversation.messages
            if messages and messages[-1].role == "user":  # a fork there, a stop while reading
                return Refused(
                    "Your last message has no reply yet: Ctrl+L answers it.", severity="warning"
                )
            return Refused("There is no reply to regenerate yet.", severity="warning")
        shown = self.session.cut_before(reply)
        plan = self.plan_to_send(None)
        if isinstance(plan, Refused):
            self.session.restore_branch(shown)
            return replace(plan, timeout=None)
        self._start_reply(plan, "regenerate")
        return None

    def continue_reply(self) -> Refused | None:
        """Ctrl+L: the last reply goes on where it was cut short, in the same
        message, the KV cache that holds it reused; when the last message is
        the user's (its reply stopped while the prompt was read), it is
        answered, reading only what was not read yet."""
        if self.generating:
            return Refused(BUSY, severity="warning")
        if self.session.engine is None:
            return Refused("No model is loaded.", severity="warning")
        conversation = self.session.conversation
        messages = conversation.messages
        reply = self.session.continuable_reply()
        answering = bool(messages) and messages[-1].role == "user"
        if reply is None and not answering:
            return Refused(
                "Only a reply cut short (by max tokens, Esc or a dropped connection) can be "
                "continued.",
                severity="warning",
            )
        info = self.session.engine.info
        if reply is not None and not info.continues_replies:
            # Said before the turn starts (the engine would refuse it too).
            return Refused(info.cannot_continue(), severity="warning")
        if reply is not None and conversation.tree.children(reply):
            return Refused(
                "This reply has messages after it in another branch; regenerate it "
                "(Ctrl+R) instead.",
                severity="warning",
            )
        plan = self.plan_to_send(None)
        if isinstance(plan, Refused):
            return replace(plan, timeout=None)
        if reply is None:
            self._start_reply(plan, "answer")
            return None
        self.session.begin_continue(reply, plan)
        self._stream_reply(reply, plan, "continue")
        return None

    # The reply.

    def _start_reply(self, plan: WindowPlan, kind: StartKind = "new") -> None:
        reply = self.session.begin_reply(plan)
        offered = self.tools_to_offer()
        if offered:
            self._start_tool_reply(reply, plan, kind, offered)
        else:
            self._stream_reply(reply, plan, kind)

    def _stream_reply(self, reply: Message, plan: WindowPlan, kind: StartKind) -> None:
        engine = self.session.engine
        assert engine is not None
        shown = tuple(self.session.conversation.messages)
        self._reply, self._continuing = reply, kind == "continue"
        self._idle.clear()
        self._cancel_prefill()
        self.listener(TurnStarted(reply, shown, plan, kind))
        loop = asyncio.get_running_loop()
        # The events are handled in the context the reply started from: the
        # listener and the saver's reports may need its context variables (a
        # UI's, for one), which the reply's thread does not have.
        context = contextvars.copy_context()
        prompt = self.session.reply_prompt(plan, self._continuing)
        settings = self.session.settings
        # A reply cut inside its thinking goes on thinking; one cut as its
        # thought closed starts its answer.
        in_thought = self._continuing and reply.thought_open
        after_thought = (
            self._continuing and bool(reply.thinking) and not in_thought and not reply.content
        )
        self._stream = ReplyStream(
            engine,
            prompt,
            # A copy: the settings pane may change them while the reply streams.
            replace(settings.sampling),
            partial(call_soon, loop, partial(self._on_stream_event, reply), context=context),
            record_probs=settings.chat.record_token_probs,
            before=partial(self.session.resume_before_reply, engine, prompt),
            continue_text=reply.content if self._continuing else None,
            reasoning=engine.info.reasoning,
            continue_thinking=reply.thinking if in_thought else None,
            continue_after_thought=after_thought,
        )
        self._pacer = FramePacer()
        self._stream.start()

    def frame_shown(self) -> None:
        """The screen has drawn the reply's newest text: the next piece comes
        after an interval that keeps the drawing within its share of a core."""
        if self._stream is not None:
            self._stream.frame_s = self._pacer.frame_shown()

    def close(self) -> None:
        """The app is ending and its database closes next. On quit the app
        waits a moment for the reply to stop (`stop_and_save` saved it so
        far); a reply's thread that has not noticed by then (a prompt slow to
        read) may report later, while the app's loop winds down: it writes
        nothing and is drawn nowhere then (a write to the closed database was
        a traceback on the terminal, 1 quit in 100 at random moments)."""
        self._closed = True

    def _on_stream_event(self, reply: Message, event: ReplyEvent) -> None:
        if self._closed:
            return
        if reply is not self._reply:
            return  # a reply that has ended already (cannot happen; be safe)
        if isinstance(event, ReplyChunk):
            if event.save_due and self._stream is not None:
                self._save_progress(self._stream)
            self.listener(
                TurnText(reply, event.text, event.tokens, event.thinking, event.thinking_tokens)
            )
        elif isinstance(event, PromptProgress):
            self.listener(TurnProgress(reply, event))
        elif isinstance(event, ReplyEnded):
            self._ended(reply, event)
        else:
            self._failed(reply, event)

    def _done(self) -> None:
        self._reply = self._stream = None
        self._continuing = False
        self._idle.set()

    def _ended(self, reply: Message, ended: ReplyEnded) -> None:
        finished = ended.finished
        continuing = self._continuing
        if continuing:
            self.session.end_continue(reply, finished, ended.thinking or None, ended.in_thought)
        elif finished.stats.finish_reason == "stopped" and not finished.stats.generated_tokens:
            self.session.drop_reply(reply)
            self._done()
            self.listener(TurnCancelled(reply))
            # No prefill: it would read the rest in the background, which Esc declined.
            return
        else:
            self.session.end_reply(reply, finished, ended.thinking, thought_open=ended.in_thought)
        self._done()
        engine = self.session.engine
        if self.session.settings.sampling.repeatable and engine is not None:
            # While the user reads: the same seed then gives the same next reply
            # (or continuation) whether this conversation stays in memory, is
            # resumed or reopened.
            self._start_rebatch(engine)
        self.listener(TurnEnded(reply, finished, continuing, ended.in_thought))
        self.schedule_prefill()  # for what was typed while the reply streamed

    def _failed(self, reply: Message, failed: ReplyFailed) -> None:
        session = self.session
        if self._continuing:
            # The reply stays as it was: nothing of it is dropped.
            session.end_continue_failed(reply)
            self._done()
            self.listener(TurnFailed(reply, failed.error, continued=True))
            return
        session.drop_reply(reply)
        conversation = session.conversation
        messages = conversation.messages
        fresh = bool(messages) and not conversation.tree.children(messages[-1])
        taken_back = None
        if failed.prompt_too_long or (failed.server_failed and fresh):
            # Nothing is lost: the message goes back into the box, to be
            # shortened or sent again once the server answers.
            taken_back = session.take_back_last_message()
        self._done()
        self.listener(TurnFailed(reply, failed.error, taken_back=taken_back))

    def stop(self) -> bool:
        """Esc: end the reply within one token (its end arrives, and is saved,
        as usual). False when no reply is being generated."""
        if self._tool_turn is not None:
            self._tool_turn.cancel()
            return True
        if self._stream is None:
            return False
        self._stream.cancel()
        return True

    def stop_and_save(self) -> None:
        """`stop`, and the reply so far saved now too: on quit, a reply whose
        prompt is still being evaluated does not end before the app does."""
        if self._tool_turn is not None:
            self._tool_turn.cancel()
            self._save_tool_progress()
        if self._stream is not None:
            self._stream.cancel()
            self._save_progress(self._stream)

    def _save_progress(self, stream: ReplyStream) -> None:
        self.session.saver.save_progress(
            stream.text, stream.thinking or None, thought_open=stream.in_thought
        )

    def save_all(self) -> None:
        """Write whatever is not saved yet (the reply so far included)."""
        stream = self._stream
        self.session.save_all(
            self.reply_text, stream.thinking or None if stream is not None else None
        )

    # A reply with tools (chat.session.tool_turn).

    def tools_to_offer(self) -> list[OfferedTool]:
        """The tools the next reply is offered: none when the conversation has
        tools off, no server is ready, or the model cannot call tools (its
        template does not show it how, or its server takes no tools)."""
        tools, engine = self.tools, self.session.engine
        if tools is None or engine is None or not engine.info.calls_tools:
            return []
        return tools.offered()

    def why_no_tools(self) -> str | None:
        """Why the model in use is offered no tools although servers may be
        ready (its template or server cannot take them), in one sentence;
        None when it can, or no model is loaded."""
        engine = self.session.engine
        if engine is None or engine.info.calls_tools:
            return None
        reason = engine.info.no_tools_reason or (
            "its chat template does not show it how to call a tool"
        )
        return f"The model in use cannot call tools: {reason.rstrip('.')}."

    def _offered_definitions(self) -> list[ToolDefinition]:
        return [offered.definition for offered in self.tools_to_offer()]

    def _start_tool_reply(
        self, reply: Message, plan: WindowPlan, kind: StartKind, offered: list[OfferedTool]
    ) -> None:
        engine, tools = self.session.engine, self.tools
        assert engine is not None and tools is not None
        shown = tuple(self.session.conversation.messages)
        self._reply, self._continuing = reply, False
        self._idle.clear()
        self._cancel_prefill()
        self.listener(TurnStarted(reply, shown, plan, kind))
        tool_turn = ToolTurn(
            engine,
            tools,
            offered,
            replace(self.session.settings.sampling),  # the settings pane may change them
            reply,
            self._tool_event,
            partial(self._tool_text, reply),
            partial(self._tool_progress, reply),
        )
        self._tool_turn = tool_turn
        messages = cast("list[ChatMessage]", self.session.reply_prompt(plan))
        # As a plain reply's stream does (`before`): a saved KV cache put back
        # first, when the message came before a prefill could.
        before = partial(
            self.session.resume_before_reply,
            engine,
            messages,
            [tool.definition for tool in offered],
        )
        self._tool_task = asyncio.get_running_loop().create_task(
            self._run_tool_turn(reply, tool_turn, messages, before), name="tool turn"
        )

    def _tool_event(self, event: ToolTurnEvent) -> None:
        """A step of the tool turn: once a call has ended, the reply's row
        holds the steps so far (a crash loses none of them)."""
        if self._closed:
            return
        if isinstance(event, ToolCallEnded):
            self._save_tool_progress()
        self.listener(event)

    def _save_tool_progress(self) -> None:
        tool_turn = self._tool_turn
        if tool_turn is not None:
            # The reply's own steps too: whatever else saves it meanwhile
            # (`save_all`, a retry) writes them, not none.
            tool_turn.reply.tool_steps = tool_steps_of(tool_turn.so_far(), tool_turn.shown)
            self.session.saver.save_progress(
                tool_turn.text,
                None,
                tool_steps=tool_turn.reply.tool_steps,
                thought_open=tool_turn.in_thought,
            )

    def _tool_text(
        self, reply: Message, text: str, tokens: int, thinking: str, thinking_tokens: int
    ) -> None:
        if reply is self._reply:
            self.listener(TurnText(reply, text, tokens, thinking, thinking_tokens))

    def _tool_progress(self, reply: Message, progress: PromptProgress) -> None:
        """As a plain reply's: a long prompt (the tools' definitions make it
        long) says how far it has been read."""
        if reply is self._reply and not self._closed:
            self.listener(TurnProgress(reply, progress))

    async def _run_tool_turn(
        self,
        reply: Message,
        tool_turn: ToolTurn,
        messages: Sequence[ChatMessage],
        before: Callable[[], object],
    ) -> None:
        try:
            with contextlib.suppress(Exception):  # a head start only, as a prefill
                await in_thread("resume", before)
            outcome = await tool_turn.run(messages)
        except Exception as error:  # a bug or a llama.cpp failure: say so, keep the app alive
            outcome = ToolLoopOutcome("failed", problem=f"Generation failed: {error}")
        self._tool_turn = self._tool_task = None
        self._tool_turn_ended(reply, outcome, tool_turn)

    def _tool_turn_ended(
        self, reply: Message, outcome: ToolLoopOutcome, tool_turn: ToolTurn
    ) -> None:
        """The reply keeps its answer (the last step's, its thinking apart);
        the steps before it were drawn as they came, and are kept so (each
        one's thinking apart)."""
        if self._closed:
            return
        answer_text, thinking = tool_turn.text, tool_turn.thinking
        steps = outcome.steps
        if not steps:
            self._failed(reply, ReplyFailed(outcome.problem or "The reply failed."))
            return
        if outcome.problem:
            self.listener(ToolTurnStopped(reply, outcome.problem))
        last = steps[-1]
        if len(steps) == 1 and not last.calls:  # it called nothing
            ended = ReplyEnded(
                replace(last.finished, text=answer_text), thinking, tool_turn.in_thought
            )
            self._ended(reply, ended)
            return
        stats = last.finished.stats
        if outcome.end == "cancelled":
            stats = replace(stats, finish_reason="stopped")
        # The steps are kept before the answer (chat.session.tool_history),
        # and sent again as the model saw them: the answer's sampled ids
        # still follow what they followed. A turn that ended with a call's
        # result has no answer: its last step is kept with its calls.
        answer = answer_of(outcome)
        in_thought = False
        if answer is not None:
            kept = replace(answer, text=answer_text, stats=stats)
            in_thought = tool_turn.in_thought
        else:
            kept = replace(last.finished, text="", stats=stats, token_ids=None, tool_calls=())
            thinking = ""
        steps_kept = tool_steps_of(outcome, tool_turn.shown)
        self.session.end_reply(reply, kept, thinking, steps_kept, thought_open=in_thought)
        self._done()
        self.listener(TurnEnded(reply, kept, in_thought=in_thought))
        self.schedule_prefill()

    # Work done ahead while the user pauses.

    def schedule_prefill(self) -> None:
        """Evaluate ahead, after a pause, what the next reply will evaluate."""
        self._cancel_prefill()
        with contextlib.suppress(RuntimeError):  # no loop: nothing to schedule on
            loop = asyncio.get_running_loop()
            self._prefill = loop.call_later(PREFILL_PAUSE_S, self.prefill_now)

    def _cancel_prefill(self) -> None:
        self._prefill_after_rebatch = False
        if self._prefill is not None:
            self._prefill.cancel()
            self._prefill = None

    def _start_rebatch(self, engine: Engine) -> None:
        rebatch = asyncio.ensure_future(in_thread("rebatch", _rebatch_quietly, engine))
        self._rebatch = rebatch
        rebatch.add_done_callback(self._rebatched)

    def _rebatched(self, rebatch: asyncio.Future[None]) -> None:
        if rebatch is not self._rebatch:
            return
        self._rebatch = None
        if self._prefill_after_rebatch:
            self._prefill_after_rebatch = False
            self.prefill_now()

    def prefill_now(self) -> None:
        """Evaluate ahead, in a thread, what the next reply will evaluate (see
        `ChatSession.prefill_prompt`), and put back a saved KV cache first
        (instant resume). Sent otherwise, nothing changes but the CPU time."""
        self._prefill = None
        engine = self.session.engine
        if engine is None or self.generating:
            return
        if self._rebatch is not None:
            # The engine is busy with it and would do nothing now: after it.
            self._prefill_after_rebatch = True
            return
        if self.counting():
            return  # planning would count them too; done, the count schedules this again
        chat = self.session.settings.chat
        if not (chat.prefill or self.session.resume_pending):
            return  # nothing to evaluate ahead and no saved KV cache to put back
        # Planned in the thread too: with a long conversation or draft, planning
        # takes longer than a keystroke may.
        start_thread(
            "prefill",
            _prefill_quietly,
            engine,
            self.session,
            self.prompt_for(self.typed().strip("\n")),
            self.editing(),
            chat.prefill,
            self.session.settings.sampling.repeatable,
            # The tools the reply will be offered: the template renders them
            # into the prompt's head, so a prefill without them would evaluate
            # a prompt the tool turn's first step does not send.
            self._offered_definitions(),
        )


def _prefill_quietly(
    engine: Engine,
    session: ChatSession,
    text: str,
    editing: Message | None,
    prefill: bool,
    exact: bool,
    tools: Sequence[ToolDefinition],
) -> None:
    """A prefill is only a head start: if it fails, sending the text meets the
    same problem and reports it, so nothing is shown from here. A saved KV cache
    of the conversation (instant resume) is put back first when it holds more."""
    with contextlib.suppress(Exception):
        prompt = session.prefill_prompt(text, before=editing)
        if prompt is not None:
            if session.resume_pending:
                session.resume(engine, *prompt, tools)
            if prefill:
                engine.prefill(*prompt, exact=exact, tools=tools)


def _rebatch_quietly(engine: Engine) -> None:
    """Like a prefill, only a head start: the next reply does it if this fails."""
    with contextlib.suppress(Exception):
        engine.rebatch_reply()
