"""The turn's events drawn on the chat screen: the user's message and the
reply's view when a turn starts, the reply's text as it streams, its figures
and notices at the end, a message waiting for the model.

The turn (chat.session.turn) decides; this draws. The turn reports through
one callback (`TurnDrawer.listener`), which posts each event to the screen
as a `TurnUpdate`: the events are drawn one after the other, in order, a
little after the turn moved on. The screen hands each to `draw`. Text that
comes while the last text posted is not drawn yet joins it: a screen that
falls behind draws what came meanwhile at once, not one delivery a frame.
Until a reply's end is drawn the screen counts as generating (`drawing`), so
that nothing starts over a reply still on its way to the screen.
"""

from __future__ import annotations

import asyncio
import functools
from typing import cast

from textual.screen import Screen
from textual.signal import Signal

from chat.conversations.conversation import Message
from chat.sanitize import sanitize, sanitize_line
from chat.session.tool_loop import PermissionRequest
from chat.session.tool_turn import (
    ToolCallAsked,
    ToolCallEnded,
    ToolCallStarted,
    ToolStepEnded,
    ToolTurnEvent,
    ToolTurnStopped,
)
from chat.session.turn import (
    MessageWaiting,
    Refused,
    Turn,
    TurnCancelled,
    TurnEnded,
    TurnEvent,
    TurnFailed,
    TurnProgress,
    TurnStarted,
    TurnText,
    WaitingOver,
)
from chat.ui.messages import TurnUpdate
from chat.ui.textual_fixes import textual_known
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.draft import Draft
from chat.ui.widgets.message_view import AssistantMessageView, MessageView, WaitingMessage
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar


def _joined(first: TurnText, then: TurnText) -> TurnText:
    """Two deliveries of the same reply's text as one."""
    return TurnText(
        first.reply,
        first.text + then.text,
        first.tokens + then.tokens,
        first.thinking + then.thinking,
        first.thinking_tokens + then.thinking_tokens,
    )


def tell(screen: Screen[None], refused: Refused) -> None:
    """A message the turn refused to send, as a notice."""
    screen.notify(
        refused.text,
        title=refused.title,
        severity="warning" if refused.severity == "warning" else "error",
        timeout=refused.timeout,
    )


def withdraw(screen: Screen[None], refused: Refused) -> None:
    """Take down the notice `tell` put up for `refused`, if it is still up:
    what it said no longer stands (the user has since sent a message, without
    the file it named, or once the model loaded). The app's list of notices
    keeps it. Textual takes down only all notices at once, so this reaches
    its collection of them, on the versions it was tested with; on others
    the notice stays until its timeout."""
    if not textual_known():
        return
    app = screen.app
    # As the app's `notify` put them up: sanitized.
    message, title = sanitize(refused.text), sanitize_line(refused.title)
    up = [n for n in app._notifications if n.message == message and n.title == title]
    for notification in up:
        app._unnotify(notification, refresh=False)
    if up:
        app._refresh_notifications()


class TurnDrawer:
    def __init__(self, screen: Screen[None], turn: Turn) -> None:
        self._screen = screen
        self._turn = turn
        self._reply_view: AssistantMessageView | None = None
        """The reply being drawn."""
        self._undrawn = 0
        """Replies the turn started whose end is not drawn yet."""
        self._reply_drawn = asyncio.Event()
        self._reply_drawn.set()
        self._text_waiting: TurnUpdate | None = None
        """The last update posted, when it is text not drawn yet (text joins it)."""
        self._blink_held: bool | None = None
        """The prompt box's cursor_blink while a reply streams (held steady), else None."""
        self.reply_shown: Signal[int] = Signal(screen, "reply_shown")
        """Published each time reply tokens are on screen, with how many (the
        benchmark measures decode speed where the user sees it)."""

    @functools.cached_property
    def _meter(self) -> ContextMeter:
        """The screen's meter (looked up once: each delivery draws on it)."""
        return self._screen.query_one(ContextMeter)

    @property
    def drawing(self) -> bool:
        """A reply the turn started is not drawn to its end yet."""
        return self._undrawn > 0

    async def reply_drawn(self) -> None:
        """Return once no reply is being drawn (the turn's end shown)."""
        await self._reply_drawn.wait()

    def listener(self, event: TurnEvent) -> None:
        """The turn's listener: each event is drawn in turn, as a message."""
        if isinstance(event, TurnStarted):
            self._undrawn += 1
            self._reply_drawn.clear()
        waiting = self._text_waiting
        if isinstance(event, TurnText) and waiting is not None:
            text = cast(TurnText, waiting.event)
            if text.reply is event.reply:
                waiting.event = _joined(text, event)
                return
        update = TurnUpdate(event)
        self._text_waiting = update if isinstance(event, TurnText) else None
        self._screen.post_message(update)

    async def draw(self, event: TurnEvent) -> None:
        if isinstance(event, TurnText):
            if self._text_waiting is not None and self._text_waiting.event is event:
                self._text_waiting = None  # text from now on is a new update
            await self._show_text(event)
        elif isinstance(event, TurnProgress):
            if self._is_drawing(event.reply):
                self._screen.query_one(StatusBar).show_prompt_progress(event.progress)
        elif isinstance(event, TurnStarted):
            await self._show_started(event)
        elif isinstance(event, TurnEnded):
            await self._show_ended(event)
        elif isinstance(event, TurnCancelled):
            await self._show_cancelled(event)
        elif isinstance(event, TurnFailed):
            await self._show_failed(event)
        elif isinstance(event, MessageWaiting):
            await self._show_waiting(event.text)
        elif isinstance(event, WaitingOver):
            await self._waiting_over(event)
        else:
            await self._show_tool_event(event)

    def _is_drawing(self, reply: Message) -> bool:
        return self._reply_view is not None and self._reply_view.message is reply

    def _mark_branches(self, views: list[MessageView]) -> None:
        ConversationView.mark_branches(views, self._turn.session.alternatives)

    async def _show_started(self, started: TurnStarted) -> None:
        screen = self._screen
        view = screen.query_one(ConversationView)
        if started.kind != "regenerate":
            view.select(None)  # a new turn: the keys apply to the newest messages again
        if started.kind == "continue":
            views = view.message_views()
            reply_view = views[-1] if views else None
            if not isinstance(reply_view, AssistantMessageView):
                return
            reply_view.start_stream()
            view.anchor()
        else:
            self._mark_branches(await view.follow_branch(started.shown))
            views = view.message_views()
            reply_view = None
        ConversationView.mark_window(views, self._turn.session.window_states)
        self._meter.show(MeterState.from_plan(started.plan))
        if reply_view is None:
            reply_view = await view.start_reply(started.reply)
        self._reply_view = reply_view
        self._hold_cursor_blink(True)
        screen.query_one(StatusBar).show_generating()
        screen.refresh_bindings()

    async def _show_text(self, text: TurnText) -> None:
        if not self._is_drawing(text.reply):
            return
        assert self._reply_view is not None
        if text.tokens:
            self._meter.add_reply_tokens(text.tokens, text.thinking_tokens)
        if text.text or text.thinking or text.thinking_tokens:
            await self._reply_view.append(text.text, text.thinking, text.thinking_tokens)
        if text.tokens:
            self.reply_shown.publish(text.tokens)
        self._turn.frame_shown()

    def _drawn(self) -> None:
        """The reply's end is drawn (or it had no view): the screen takes the next one."""
        self._reply_view = None
        self._undrawn = max(0, self._undrawn - 1)
        if not self._undrawn:
            self._reply_drawn.set()
            self._hold_cursor_blink(False)
            self._meter.draw_pending()
        self._screen.refresh_bindings()

    def _hold_cursor_blink(self, hold: bool) -> None:
        """While a reply streams the prompt box's cursor stays lit: each blink
        is a frame of its own, two a second, as costly as a frame of text."""
        box = self._screen.query_one(PromptBox)
        if hold and self._blink_held is None:
            self._blink_held = box.cursor_blink
            box.cursor_blink = False
        elif not hold and self._blink_held is not None:
            box.cursor_blink, self._blink_held = self._blink_held, None

    async def _show_ended(self, ended: TurnEnded) -> None:
        view = self._reply_view
        if view is None or view.message is not ended.reply:
            self._drawn()
            return
        screen = self._screen
        reply, finished = ended.reply, ended.finished
        await view.finish(reply.content, reply.stats, reply.thinking)
        self._drawn()
        self._mark_branches([view])
        screen.query_one(StatusBar).show_reply(finished.stats)
        if finished.error is not None:
            # The connection to a model server dropped mid-reply: what came is kept.
            engine = self._turn.session.engine
            then = (
                ": Ctrl+L continues it once the server answers again."
                if engine is not None and engine.info.continues_replies
                else "."
            )
            screen.notify(
                f"{finished.error} The reply so far is kept{then}",
                title="Reply cut off",
                severity="error",
                timeout=15,
            )
        if finished.stats.finish_reason == "context_full":
            screen.notify(
                "The context window is full: the reply was cut off. "
                "Start a new conversation (Ctrl+N).",
                severity="warning",
            )

    async def _show_cancelled(self, cancelled: TurnCancelled) -> None:
        """Esc while the prompt was evaluated: no reply is kept."""
        view = self._reply_view
        if view is not None and view.message is cancelled.reply:
            await view.finish("", None)
            await view.remove()
        self._drawn()
        self._screen.query_one(StatusBar).show_stopped_reading()
        self._screen.notify(
            "Stopped while reading the prompt. Your message is kept; Ctrl+L answers it, "
            "reading only what was not read yet.",
            timeout=8,
        )

    async def _show_failed(self, failed: TurnFailed) -> None:
        screen = self._screen
        view = self._reply_view if self._is_drawing(failed.reply) else None
        status = screen.query_one(StatusBar)
        if failed.continued:
            if view is not None:  # the reply stays as it was
                await view.finish(failed.reply.content, failed.reply.stats)
            self._drawn()
            screen.notify(failed.error, severity="error", timeout=10)
            status.show_no_reply()
            return
        if view is not None:
            await view.finish("", None)
            await view.remove()
        last = failed.taken_back
        if last is not None:
            views = screen.query_one(ConversationView).message_views()
            if views and views[-1].message is last:
                await views[-1].remove()
            screen.query_one(Draft).put_back_sent(last)
        self._drawn()
        screen.notify(failed.error, severity="error", timeout=10)
        status.show_no_reply()
        engine = self._turn.session.engine
        if engine is not None:
            status.show_model(engine.info)

    async def _show_tool_event(self, event: ToolTurnEvent) -> None:
        """A step of a tool turn: its text moved above its calls, a call's
        block as it is asked, runs and ends."""
        if isinstance(event, ToolTurnStopped):
            self._screen.notify(
                event.problem, title="Tools", severity="warning", timeout=12, markup=False
            )
            return
        view = self._reply_view
        if view is None or view.message is not event.reply:
            return
        steps = await view.tool_steps()
        if isinstance(event, ToolStepEnded):
            await view.restart_body()
            await steps.add_step(event.step, event.text, event.finished.stats)
            # What the step wrote, its call included, is a call now (its
            # thinking stays thinking): the meter's tools segment.
            stats = event.finished.stats
            self._meter.move_reply_to_tools(stats.generated_tokens - stats.thinking_tokens)
        elif isinstance(event, ToolCallAsked):
            await steps.show_call(event.request, "asked")
        elif isinstance(event, ToolCallStarted):
            await steps.show_call(event.request, "running")
        elif isinstance(event, ToolCallEnded):
            record = event.record
            request = PermissionRequest(
                record.server, record.tool, record.call.arguments, record.call
            )
            await steps.finish_call(record, request)
            # The result is part of the prompt from the next step on.
            self._meter.add_tool_tokens(record.result_tokens)

    async def _show_waiting(self, text: str) -> None:
        """A message sent while the model loads, shown until the model is ready."""
        view = self._screen.query_one(ConversationView)
        await view.mount(WaitingMessage(text))
        view.anchor()
        self._screen.refresh_bindings()

    async def _waiting_over(self, over: WaitingOver) -> None:
        for waiting in self._screen.query(WaitingMessage):
            await waiting.remove()
        self._screen.refresh_bindings()
        if over.taken_back:
            self._screen.query_one(Draft).put_back(over.text)
        if over.refused is not None:
            tell(self._screen, over.refused)
