"""What the context meter shows: how sending the text being written would fill
the window, planned off the UI thread, and the count of a long conversation's
messages, made in a thread when it is opened.

Planning renders the model's chat template (a stranger's code, which may run
up to its time limit) and a model server counts over the network: typing
never waits for either. The newest text's plan replaces an older one still
under way. While the conversation is being counted the meter says
"counting", Enter waits (the turn asks `counting`), and the count refreshes
the meter when it ends.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from functools import partial

from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker

from chat.conversations.conversation import Conversation
from chat.runtime.background import in_thread
from chat.session.chat_session import ChatSession
from chat.session.context_window import ContextBudget, WindowPlan
from chat.session.turn import Turn
from chat.ui.widgets.attachment_strip import AttachmentStrip
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.message_view import MessageView
from chat.ui.widgets.prompt_box import PromptBox

METER_DEBOUNCE_S = 0.15
"""Typing updates the meter after this pause, not on every keystroke."""
COUNT_IN_THREAD_ABOVE = 100
"""Longer conversations are counted in a thread when opened, the meter saying
"counting" meanwhile (shorter ones are counted by the first plan)."""
COUNT_IN_THREAD_CHARS = 200_000
"""A conversation of fewer messages than COUNT_IN_THREAD_ABOVE, but longer."""
DRAFT_SAYS_COUNTING_ABOVE = 20_000
"""Characters of a draft above which the meter says "counting" while it is planned."""


class MeterPlanner:
    def __init__(self, screen: Screen[None], turn: Turn, drawing: Callable[[], bool]) -> None:
        """`drawing`: whether a reply is being drawn; the meter then counts its tokens."""
        self._screen = screen
        self._turn = turn
        self._drawing = drawing
        self._debounce: Timer | None = None
        self._count_worker: Worker[None] | None = None

    @property
    def _session(self) -> ChatSession:
        return self._turn.session

    def draft_text(self, text: str | None = None) -> str:
        """What sending the prompt box's text (or `text`) would send the model."""
        if text is None:
            text = self._screen.query_one(PromptBox).text
        return self._turn.prompt_for(text)

    def typed(self) -> None:
        """The prompt box changed: the meter follows after a pause in typing."""
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self._screen.set_timer(METER_DEBOUNCE_S, self.refresh)

    def refresh(self) -> None:
        """Show how sending the text in the prompt box would fill the window
        (planned in a thread; see the module docstring)."""
        screen = self._screen
        screen.call_later(self._show_attachments)
        if self._drawing() or self._session.budget is None or self.counting():
            return
        text = self.draft_text()
        if len(text) > DRAFT_SAYS_COUNTING_ABOVE:
            screen.query_one(ContextMeter).show_counting("the message's")
        # The function, not a coroutine made now: a worker replaced or cancelled
        # before it starts (the screen closing) never makes it, so none is left
        # never awaited.
        _: Worker[None] = screen.run_worker(
            partial(self._plan_in_thread, text),
            group="plan-meter",
            exclusive=True,  # a plan for newer text replaces this one
            exit_on_error=False,
        )

    async def _plan_in_thread(self, text: str) -> None:
        conversation = self._session.conversation
        plan = await in_thread("plan", self._session.plan, text, self._turn.editing())
        if self._session.conversation is conversation and self.draft_text() == text:
            self.show(plan)

    def show(self, plan: WindowPlan | None) -> None:
        """The meter shows `plan`; the messages shown get the counts it made,
        and those it leaves out of the window say so (the meter counts them:
        "82 left out"; the headers say which)."""
        screen = self._screen
        if plan is None or self._drawing():
            return
        screen.query_one(ContextMeter).show(MeterState.from_plan(plan))
        views = screen.query_one(ConversationView).message_views()
        self._session.mark_window(plan)
        ConversationView.mark_window(views, self._session.window_states)

    def count_shown(self, views: Sequence[MessageView]) -> None:
        """The messages of `views` that have no token count yet (a page of older
        ones just shown, a branch switched to) get theirs in their headers.
        Cheap once the conversation was planned: the counts are cached."""
        if self._session.budget is None:
            return
        counted = {
            id(message)
            for message in self._session.fill_token_counts(
                [view.message for view in views if view.message.role != "system"]
            )
        }
        for view in views:
            if id(view.message) in counted:
                view.refresh_header()

    async def _show_attachments(self) -> None:
        """The strip above the prompt box: each file attached, with its tokens."""
        screen = self._screen
        attached = self._turn.draft.resolve(screen.query_one(PromptBox).text)
        budget = self._session.budget
        await screen.query_one(AttachmentStrip).show(
            [
                (attachment, budget.attachment_tokens(attachment) if budget else None)
                for attachment in attached.attachments
            ],
            attached.problems,
        )

    def recount(self) -> None:
        """Count every message of the conversation in a thread, then refresh the meter.

        With a real tokenizer, a few thousand messages take seconds to count (each
        is rendered through the chat template); counts are cached, so afterwards
        planning is cheap. Meanwhile the screen stays responsive, the meter says
        "counting", and Enter waits (`counting`).
        """
        session = self._session
        budget = session.budget
        if budget is None:
            return
        messages = session.conversation.messages
        if (
            len(messages) <= COUNT_IN_THREAD_ABOVE
            and sum(len(message.content) for message in messages) <= COUNT_IN_THREAD_CHARS
        ):
            self.refresh()
            return
        self._screen.query_one(ContextMeter).show_counting()
        self._count_worker = self._screen.run_worker(
            partial(self._count_in_thread, budget, session.conversation),  # as in `refresh`
            group="count-messages",
            exclusive=True,  # a newer count (another conversation) replaces this one
            exit_on_error=False,
        )

    async def _count_in_thread(self, budget: ContextBudget, conversation: Conversation) -> None:
        # After the next frame: the messages appear first, without competing for the GIL.
        drawn = asyncio.Event()
        self._screen.call_after_refresh(drawn.set)
        await drawn.wait()
        messages = list(conversation.messages)
        cancel = threading.Event()
        try:
            # The engine's tokenizer reads only the vocabulary: safe beside a reply.
            await in_thread(
                "count", budget.count_messages, conversation.system_prompt, messages, cancel
            )
        finally:
            cancel.set()  # replaced by a newer count, or the app quits: the thread stops
        self._count_worker = None
        if self._session.budget is budget and self._session.conversation is conversation:
            self.refresh()
            self._turn.schedule_prefill()

    def counting(self) -> bool:
        """Whether the conversation's messages are being counted (`recount`)."""
        worker = self._count_worker
        return worker is not None and not worker.is_finished
