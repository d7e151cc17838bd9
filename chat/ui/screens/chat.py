"""The chat screen: the conversation, the prompt box and the status bar.

It shows a `ChatSession` (chat.session.chat_session: the conversation, its
settings, window planning and saving, without Textual) and feeds it what the
user does. The flow of one turn: the prompt box posts `Submitted`; the
session adds and saves the user's message; a `ReplyStream`
(chat.session.reply_stream) runs the engine in a background thread and posts
`ReplyUpdate`s (chunks of tokens, then the end); the screen streams them into
the reply's Markdown view.

The screen is given what it works with: the default settings (which the app's
settings pane changes in place) and the model loader (the one owner of the
engine). It asks the app for anything else by posting a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.signal import Signal
from textual.timer import Timer
from textual.widgets import LoadingIndicator, Static
from textual.worker import Worker

from chat.conversations.attachments import Attachment, AttachmentError, prompt_text
from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver
from chat.conversations.store import Store
from chat.conversations.tree import index_of
from chat.engine.base import Engine, PromptProgress
from chat.errors import KvchatError
from chat.session.background import in_thread, start_thread
from chat.session.chat_session import ChatSession
from chat.session.context_window import ContextBudget, WindowPlan
from chat.session.draft_attachments import Attached, DraftAttachments, without_mention
from chat.session.frame_pacing import FramePacer
from chat.session.model_loader import ModelLoader
from chat.session.reply_stream import ReplyChunk, ReplyEnded, ReplyFailed, ReplyStream
from chat.settings.presets import Preset, find_preset
from chat.settings.schema import Settings
from chat.ui.commands import ChatScreenCommands, PresetCommands
from chat.ui.messages import ReplyUpdate, SwitchModelRequested, SwitchServerRequested
from chat.ui.screens.help import HelpScreen
from chat.ui.untrusted import shown
from chat.ui.widgets.attachment_strip import AttachmentChip, AttachmentStrip
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.keys_footer import KeysFooter
from chat.ui.widgets.message_view import (
    AssistantMessageView,
    BranchSwitch,
    CopyButton,
    MessageView,
    WaitingMessage,
    markdown_parser,
)
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar

# The screens this one opens (conversations, token view, dialogs) and the
# exporter are imported where they are opened: the first frame does not need
# them, and startup to the first frame is a measured target (chat.bench).
if TYPE_CHECKING:
    from textual.widgets import Markdown

    from chat.ui.clipboard import CodeBlock
    from chat.ui.screens.conversations import OpenChoice
    from chat.ui.widgets.find_bar import FindBar


class ChatScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Regen", tooltip="Regenerate the last reply"),
        Binding("ctrl+n", "new_conversation", "New", tooltip="New conversation"),
        Binding("ctrl+o", "open_conversations", "Open"),
        # priority: in the prompt box, Ctrl+E would otherwise move to the end of the line.
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding(
            "f1",
            "context_help",
            "Help",
            tooltip="Every key and every figure of the status bar",
            show=False,
        ),
        Binding("ctrl+t", "token_view", "Tokens"),
        # Function keys, not alt+letter: terminals send alt+f as ESC f, which
        # Textual reads as ctrl+right (Emacs' word forward).
        Binding("f3", "edit_message", "Edit", tooltip="Edit a message as a new branch"),
        Binding(
            "alt+left",
            "switch_branch(-1)",
            "Branch",
            key_display="alt+←→",
            tooltip="Show the previous or next alternative of a message",
        ),
        Binding("alt+right", "switch_branch(1)", "Next alternative", show=False),
        Binding("alt+up", "select_message(-1)", "Select previous message", show=False),
        Binding("alt+down", "select_message(1)", "Select next message", show=False),
        Binding("f4", "fork", "Fork here", show=False),
        Binding(
            "f5", "copy_message", "Copy", tooltip="Copy the selected message (else the last reply)"
        ),
        Binding("f8", "pick_model", "Models", tooltip="Switch model, or download one", show=False),
        # Not F6/F7: the prompt box (a TextArea) takes those to select text.
        Binding(
            "ctrl+l",
            "continue_reply",
            "Continue",
            tooltip="Continue the last reply where it was cut short (L: longer)",
            show=False,
        ),
        Binding(
            "ctrl+g",
            "compose_in_editor",
            "Editor",
            tooltip="Write the message in $VISUAL/$EDITOR",
            show=False,
        ),
        Binding(
            "f9", "choose_preset", "Preset", tooltip="A persona for this conversation", show=False
        ),
        Binding("ctrl+f", "find", "Find", tooltip="Find in the conversation", show=False),
    ]
    COMMANDS = {ChatScreenCommands, PresetCommands}

    # Typing updates the meter after this pause, not on every keystroke.
    METER_DEBOUNCE_S = 0.15
    # After this pause in typing, the message is evaluated ahead (Engine.prefill):
    # sent unchanged, its reply starts at once. Typing speed leaves ~0.2 s
    # between keys; a longer pause usually means the text is read over.
    PREFILL_PAUSE_S = 0.5
    # Longer conversations are counted in a thread when opened, the meter
    # saying "counting" meanwhile (shorter ones are counted by the first plan).
    COUNT_IN_THREAD_ABOVE = 100
    COUNT_IN_THREAD_CHARS = 200_000
    """A conversation of fewer messages than COUNT_IN_THREAD_ABOVE, but longer."""
    DRAFT_SAYS_COUNTING_ABOVE = 20_000
    """Characters of a draft above which the meter says "counting" while it is planned."""

    def __init__(
        self, defaults: Settings, models: ModelLoader, presets: Sequence[Preset] = ()
    ) -> None:
        super().__init__()
        self.presets = list(presets)
        """What "Use preset" (F9, the palette) offers (chat.settings.presets)."""
        self.session = ChatSession(
            defaults,
            models,
            self._report_save_problem,
            self._not_saving_changed,
            self._changed_elsewhere,
        )
        self._save_retry: Timer | None = None
        self._reply_view: AssistantMessageView | None = None
        self._stream: ReplyStream | None = None
        self._pacer = FramePacer()
        """How often the reply being streamed is drawn."""
        self._continuing = False
        """The reply streaming is the continuation of the last one (Ctrl+L)."""
        self._meter_timer: Timer | None = None
        self._prefill_timer: Timer | None = None
        self._count_worker: Worker[None] | None = None
        self.reply_shown: Signal[int] = Signal(self, "reply_shown")
        """Published each time reply tokens are on screen, with how many (the
        benchmark measures decode speed where the user sees it)."""
        self._check_model_when_loaded = False
        self._models = models
        self._waiting: WaitingMessage | None = None
        """A message sent while the model loads, shown until the model is ready."""
        self._editing: tuple[Message, str] | None = None
        """The message being edited in the prompt box, and the draft it replaced there."""
        self._find_bar: FindBar | None = None
        """Mounted the first time Ctrl+F opens it."""
        self.draft = DraftAttachments()
        """The files attached to the message being written (chat.session.draft_attachments)."""
        self._picked_before_edit: list[Attachment] = []
        """The draft's picked files while a message of yours is edited."""

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def settings(self) -> Settings:
        """This conversation's settings (see chat.session.chat_session)."""
        return self.session.settings

    @property
    def preset_in_use(self) -> str:
        """The conversation's preset ("" for none)."""
        return self.conversation.preset

    @property
    def saver(self) -> ConversationSaver:
        return self.session.saver

    @property
    def engine(self) -> Engine | None:
        """The model replies use now (None while none is loaded or another loads)."""
        return self.session.engine

    @property
    def generating(self) -> bool:
        return self._reply_view is not None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The footer shows the keys that do something now (so that they fit on
        one line at 100 columns): Esc while there is something to stop, the
        branch keys once a message has alternatives, and so on."""
        if action == "stop":
            return self.generating or self._waiting is not None or self._editing is not None
        if action == "copy_message":
            return bool(self.conversation.messages)
        if action in ("regenerate", "edit_message", "fork"):
            return not self.generating and bool(self.conversation.messages)
        if action == "switch_branch":
            editing = self._editing is not None
            return (
                not self.generating
                and not editing
                and len(self.conversation.tree) > len(self.conversation.messages)
            )
        return True

    def compose(self) -> ComposeResult:
        yield ConversationView(id="conversation")
        yield Static("", id="notice", markup=False)
        yield ContextMeter(id="meter")
        yield Static("", id="editing", markup=False)
        yield AttachmentStrip(id="attachments")
        yield PromptBox(id="prompt")
        yield StatusBar(id="status")
        # Compact (styled in app.tcss); narrower than 120 columns it leads with
        # help, settings and models.
        yield KeysFooter()

    async def on_mount(self) -> None:
        self.query_one("#notice").display = False
        self.query_one("#editing").display = False
        self.query_one(PromptBox).focus()
        await self._show_system_prompt()

    async def _show_system_prompt(self) -> None:
        if self.conversation.system_prompt:
            await self.query_one(ConversationView).add_message(
                Message("system", self.conversation.system_prompt)
            )

    # The model, as the app reports it.

    async def show_loading(self, name: str, *, server: bool = False) -> None:
        """`name` loads (`server`: kvchat connects to the model server `name`)."""
        doing = f"Connecting to {name}" if server else f"Loading model {name}"
        self.query_one(StatusBar).show_loading(doing)
        notice = self.query_one("#notice", Static)
        notice.update(shown(f"{doing}…  You can type meanwhile: Enter sends once it is ready."))
        notice.set_classes("loading")
        notice.display = True
        await self.mount(LoadingIndicator(id="loading"), before=notice)

    async def show_model(self, engine: Engine) -> None:
        """`engine` (the loader's) is ready: replies can be sent."""
        await self._remove_loading()
        self.query_one("#notice").display = False
        self.query_one(StatusBar).show_model(engine.info)
        # A server that cannot count before sending (Ollama, generic ones): ≈.
        self.query_one(ContextMeter).estimated = not engine.info.count_exact
        self.recount_meter()
        self._schedule_prefill()  # for what was typed while the model loaded
        # After the caller (the app, taking the model in) is done with it.
        self.call_later(self._send_waiting)
        if self._check_model_when_loaded:
            self._check_model_when_loaded = False
            self._offer_model_switch()

    async def show_reloading(self, name: str, *, server: bool = False) -> None:
        """Another model is loading to replace this one: no replies until `show_model`
        (or `show_problem`); the conversation stays as it is."""
        self.query_one(StatusBar).show_reloading(
            f"Connecting to {name}" if server else f"Reloading model {name}"
        )

    async def show_problem(self, text: str, *, no_model: bool = False) -> None:
        """An error panel (a model that failed to load, or no model at all)."""
        await self._remove_loading()
        notice = self.query_one("#notice", Static)
        notice.update(Content(text))
        notice.set_classes("no-model" if no_model else "error")
        notice.display = True
        self.query_one(StatusBar).show_no_model(
            "no model loaded" if no_model else "model failed to load"
        )
        if self._take_back_waiting():
            self.notify(
                "The model did not load, so your message was not sent: it is back in the box.",
                severity="warning",
                timeout=10,
            )

    async def _remove_loading(self) -> None:
        for indicator in self.query("#loading"):
            await indicator.remove()

    # Sending and the window.

    @on(PromptBox.Submitted)
    async def _on_submitted(self, event: PromptBox.Submitted) -> None:
        if self.generating:
            self.notify(
                "A reply is still being generated. Press Esc to stop it, or wait; "
                "your text stays in the box.",
                severity="warning",
            )
            return
        text = event.text.strip("\n")
        if self.engine is None:
            if self._models.busy:
                await self._wait_for_model(text, event.prompt_box)
            else:
                self.notify(
                    "No model is loaded yet; your text stays in the box.", severity="warning"
                )
            return
        if self._still_counting():
            return
        if self._editing is not None:
            await self._send_edited(text, event.prompt_box)
            return
        attached = self._attached(text)
        if attached is None:
            return
        plan = self._plan_to_send(prompt_text(text, attached.attachments))
        if plan is None:
            return
        event.prompt_box.clear()
        self.draft.clear()  # sent: the next message starts with none
        await self._send(text, plan, attached.attachments)

    def _plan_to_send(self, text: str) -> WindowPlan | None:
        """How sending `text` would fill the window; None when it cannot be sent
        (no model ready, or it does not fit: the user is told why)."""
        plan = self._plan(text)
        if plan is not None and plan.problem:
            # Nothing is sent and nothing is lost: the text stays in the box.
            self.notify(plan.problem, severity="error", timeout=15)
            return None
        return plan

    def _plan(self, text: str | None) -> WindowPlan | None:
        """`session.plan`; a model server that cannot count (down, answering
        garbage) makes the plan's problem, so nothing is sent and what was
        typed stays in the box."""
        try:
            return self.session.plan(text)
        except KvchatError as error:
            return WindowPlan(0, 0, 0, 0, 0, (), problem=str(error))

    async def _send(
        self, text: str, plan: WindowPlan, attachments: list[Attachment] | None = None
    ) -> None:
        """`plan`: for `text` with `attachments` (`prompt_text`)."""
        self._select(None)  # a new turn: the keys apply to the newest messages again
        message = self.session.add_user_message(text, plan, attachments or [])
        view = await self.query_one(ConversationView).add_message(message)
        self._mark_branches([view])
        await self._start_reply(plan)

    # A message sent while the model loads waits for it.

    async def _wait_for_model(self, text: str, box: PromptBox) -> None:
        """Show the message as waiting; `show_model` sends it, Esc or a failed
        load puts it back into the box."""
        if self._waiting is not None:
            self.notify(
                "A message is already waiting for the model; Esc takes it back.",
                severity="warning",
            )
            return
        box.clear()
        waiting = WaitingMessage(text)
        view = self.query_one(ConversationView)
        await view.mount(waiting)
        view.anchor()
        self._waiting = waiting
        self.refresh_bindings()
        # The load may have ended while the message was being shown.
        if self.engine is not None:
            await self._send_waiting()
        elif not self._models.busy:
            self._take_back_waiting()

    async def _send_waiting(self) -> None:
        """The model is ready: send the waiting message as Enter would have. One
        that does not fit goes back into the box, with the reason."""
        waiting, self._waiting = self._waiting, None
        self.refresh_bindings()
        if waiting is None:
            return
        await waiting.remove()
        attached = None if self.generating else self._attached(waiting.text)
        plan = None
        if attached is not None:
            plan = self._plan_to_send(prompt_text(waiting.text, attached.attachments))
        if plan is None or attached is None:
            self._put_back_in_box(waiting.text)
            return
        self.draft.picked = []  # sent with it
        await self._send(waiting.text, plan, attached.attachments)

    def _take_back_waiting(self) -> bool:
        """Put the waiting message back into the prompt box; False if none waits."""
        waiting, self._waiting = self._waiting, None
        self.refresh_bindings()
        if waiting is None:
            return False
        waiting.remove()
        self._put_back_in_box(waiting.text)
        return True

    def _put_back_in_box(self, text: str) -> None:
        """Into the prompt box, above anything typed since: nothing is lost."""
        box = self.query_one(PromptBox)
        typed = box.text
        box.text = f"{text}\n{typed}" if typed.strip() else text
        box.move_cursor(box.document.end)

    # Files attached to the message being written: `@path` in its text, or
    # picked (chat.session.draft_attachments); sent after its text.

    def _draft_text(self, text: str | None = None) -> str:
        """What sending the prompt box's text (or `text`) would send the model:
        the text, then the files attached. The meter and the prefill plan it."""
        if text is None:
            text = self.query_one(PromptBox).text
        return prompt_text(text, self.draft.resolve(text).attachments)

    def _attached(self, text: str) -> Attached | None:
        """The files a message with `text` is sent with; None, and the user is
        told why, when a file it names cannot be attached (nothing is sent)."""
        attached = self.draft.resolve(text)
        if attached.problems:
            self.notify(
                " ".join(attached.problems)
                + " Take the @ off its name to send the name as text; your message "
                "stays in the box.",
                title="Cannot attach",
                severity="error",
                timeout=12,
                markup=False,
            )
            return None
        return attached

    async def _show_attachments(self) -> None:
        """The strip above the prompt box: each file attached, with its tokens."""
        attached = self.draft.resolve(self.query_one(PromptBox).text)
        budget = self.session.budget
        await self.query_one(AttachmentStrip).show(
            [
                (attachment, budget.attachment_tokens(attachment) if budget else None)
                for attachment in attached.attachments
            ],
            attached.problems,
        )

    def action_attach_file(self) -> None:
        """The palette's "Attach a file…": a file picker; the file chosen is
        attached to the message being written."""
        from chat.ui.screens.attach_file import AttachFileScreen

        def chosen(path: str | None) -> None:
            if path is None:
                return
            try:
                attachment = self.draft.pick(path)
            except AttachmentError as error:
                self.notify(str(error), title="Cannot attach", severity="error", markup=False)
                return
            self.notify(f"Attached {attachment.name}", markup=False)
            self.refresh_meter()
            self.query_one(PromptBox).focus()

        self.app.push_screen(AttachFileScreen(self.draft.base), chosen)

    @on(AttachmentChip.Removed)
    def _on_attachment_removed(self, event: AttachmentChip.Removed) -> None:
        """A click on an attachment takes it off: a picked file is dropped, a
        file named with `@` loses the `@` (its name stays, as text)."""
        event.stop()
        self.draft.remove(event.attachment)
        box = self.query_one(PromptBox)
        text = without_mention(box.text, event.attachment.name)
        if text != box.text:
            box.text = text
            box.move_cursor(box.document.end)
        self.refresh_meter()

    def action_remove_attachments(self) -> None:
        """Take every file off the message being written."""
        box = self.query_one(PromptBox)
        attached = self.draft.resolve(box.text)
        if not attached.attachments:
            self.notify("No file is attached to the message.", severity="warning")
            return
        self.draft.clear()
        text = box.text
        for name in attached.mentioned:
            text = without_mention(text, name)
        if text != box.text:
            box.text = text
            box.move_cursor(box.document.end)
        self.refresh_meter()

    def _mark_views(self, views: list[MessageView]) -> None:
        """Show each view's token count and window state as of the last turn."""
        outside = self.session.window_states([view.message for view in views])
        for view, is_outside in zip(views, outside, strict=True):
            view.show_outside_window(is_outside)

    @on(ConversationView.EarlierShown)
    def _on_earlier_shown(self, event: ConversationView.EarlierShown) -> None:
        self._mark_branches(event.views)
        if self.session.budget is not None and self.session.has_messages_outside:
            self._mark_views(event.views)
        self._find_changed()

    def refresh_meter(self) -> None:
        """Show how sending the text in the prompt box would fill the window.

        Always planned in a thread, the meter following: a plan renders the
        model's chat template, a stranger's code that may run up to its time
        limit, and a model server counts over the network; typing never waits
        for either. The newest text's plan replaces an older one still under
        way. While the conversation is being counted, the count refreshes the
        meter when it ends."""
        self.call_later(self._show_attachments)
        if self.generating or self.session.budget is None or self._counting_messages():
            return
        text = self._draft_text()
        if len(text) > self.DRAFT_SAYS_COUNTING_ABOVE:
            self.query_one(ContextMeter).show_counting("the message's")
        self.run_worker(
            self._plan_in_thread(text),
            group="plan-meter",
            exclusive=True,  # a plan for newer text replaces this one
            exit_on_error=False,
        )

    async def _plan_in_thread(self, text: str) -> None:
        conversation = self.conversation
        plan = await in_thread("plan", self.session.plan, text)
        if self.conversation is conversation and self._draft_text() == text:
            self._show_plan(plan)

    def _show_plan(self, plan: WindowPlan | None) -> None:
        if plan is None or self.generating:
            return
        self.query_one(ContextMeter).show(MeterState.from_plan(plan))
        views = self.query_one(ConversationView).message_views()
        counted = {
            id(message)
            for message in self.session.fill_token_counts(
                [view.message for view in views if view.message.role != "system"]
            )
        }
        for view in views:
            if view.message.role == "system" and view.message.token_count != plan.system:
                view.message.token_count = plan.system
                view.refresh_header()
            elif id(view.message) in counted:
                view.refresh_header()

    def recount_meter(self) -> None:
        """Count every message of the conversation in a thread, then refresh the meter.

        With a real tokenizer, a few thousand messages take seconds to count (each
        is rendered through the chat template); counts are cached, so afterwards
        planning is cheap. Meanwhile the screen stays responsive, the meter says
        "counting", and Enter waits (`_still_counting`).
        """
        budget = self.session.budget
        if budget is None:
            return
        messages = self.conversation.messages
        if (
            len(messages) <= self.COUNT_IN_THREAD_ABOVE
            and sum(len(message.content) for message in messages) <= self.COUNT_IN_THREAD_CHARS
        ):
            self.refresh_meter()
            return
        self.query_one(ContextMeter).show_counting()
        self._count_worker = self.run_worker(
            self._count_in_thread(budget, self.conversation),
            group="count-messages",
            exclusive=True,  # a newer count (another conversation) replaces this one
            exit_on_error=False,
        )

    async def _count_in_thread(self, budget: ContextBudget, conversation: Conversation) -> None:
        # After the next frame: the messages appear first, without competing for the GIL.
        drawn = asyncio.Event()
        self.call_after_refresh(drawn.set)
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
        if self.session.budget is budget and self.conversation is conversation:
            self.refresh_meter()
            self._schedule_prefill()

    def _still_counting(self) -> bool:
        """Enter while the conversation is counted: what fits in the window is not
        known yet, so nothing is sent (the user is told; the text stays)."""
        if not self._counting_messages():
            return False
        self.notify(
            "Still counting the conversation's tokens, to know what fits in the window. "
            "Press Enter again in a moment; your text stays in the box.",
            severity="warning",
        )
        return True

    @on(PromptBox.Changed)
    def _on_prompt_changed(self) -> None:
        if self._meter_timer is not None:
            self._meter_timer.stop()
        self._meter_timer = self.set_timer(self.METER_DEBOUNCE_S, self.refresh_meter)
        self._schedule_prefill()

    def _schedule_prefill(self) -> None:
        if self._prefill_timer is not None:
            self._prefill_timer.stop()
        self._prefill_timer = self.set_timer(self.PREFILL_PAUSE_S, self._prefill_draft)

    def _prefill_draft(self) -> None:
        """Evaluate ahead, in a thread, what the next reply will evaluate (see
        `ChatSession.prefill_prompt`). Sent otherwise, nothing changes but the
        CPU time spent."""
        engine = self.engine
        if engine is None or self.generating:
            return
        if self._counting_messages():
            return  # planning would count them too; done, the count schedules this again
        if not (self.settings.chat.prefill or self.session.resume_pending):
            return  # nothing to evaluate ahead and no saved KV cache to put back
        text = self._draft_text(self.query_one(PromptBox).text.strip("\n"))
        # Planned in the thread too: with a long conversation or draft, planning
        # takes longer than a keystroke may.
        start_thread(
            "prefill",
            _prefill_quietly,
            engine,
            self.session,
            text,
            self.settings.chat.prefill,
            self.settings.sampling.repeatable,
        )

    def _counting_messages(self) -> bool:
        """Whether the conversation's messages are being counted (`recount_meter`)."""
        worker = self._count_worker
        return worker is not None and not worker.is_finished

    async def action_find(self) -> None:
        """Ctrl+F: find in the messages of the branch shown (chat.ui.widgets.find_bar)."""
        if self._find_bar is None:
            from chat.ui.widgets.find_bar import FindBar

            view = self.query_one(ConversationView)
            self._find_bar = FindBar(view, lambda: self.conversation.messages)
            await self.mount(self._find_bar, after=view)
        self._find_bar.open()

    def _find_changed(self) -> None:
        """The messages shown changed: an open find bar searches them again."""
        if self._find_bar is not None:
            self._find_bar.messages_changed()

    def on_markdown_table_of_contents_updated(self, event: Markdown.TableOfContentsUpdated) -> None:
        # A reply was drawn anew: it ended, or another branch or conversation is
        # shown. (Not one streaming: find leaves it out until it ends.)
        parent = event.markdown.parent
        if parent is None or not parent.has_class("streaming"):
            self._find_changed()

    def action_token_view(self) -> None:
        from chat.ui.screens.token_view import open_token_view

        open_token_view(self, self.conversation.messages)

    def action_context_help(self) -> None:
        self.app.push_screen(HelpScreen.of(self))

    # The reply.

    async def _start_reply(self, plan: WindowPlan) -> None:
        engine = self.engine
        assert engine is not None
        reply = self.session.begin_reply(plan)
        self._mark_views(self.query_one(ConversationView).message_views())
        self.query_one(ContextMeter).show(MeterState.from_plan(plan))
        self._reply_view = await self.query_one(ConversationView).start_reply(reply)
        self._stream_reply(engine, plan)

    def _stream_reply(
        self, engine: Engine, plan: WindowPlan, continue_text: str | None = None
    ) -> None:
        """Start the engine on the reply `plan` prompts for, its events posted
        back as `ReplyUpdate`s; `continue_text`: the cut reply it goes on with."""
        self.query_one(StatusBar).show_generating()
        self.refresh_bindings()
        prompt = self.session.reply_prompt(plan)
        self._stream = ReplyStream(
            engine,
            prompt,
            # A copy: the settings pane may change them while the reply streams.
            replace(self.settings.sampling),
            lambda event: self.post_message(ReplyUpdate(event)),
            record_probs=self.settings.chat.record_token_probs,
            before=partial(self.session.resume_before_reply, engine, prompt),
            continue_text=continue_text,
        )
        self._pacer = FramePacer()
        self._stream.start()

    async def on_reply_update(self, message: ReplyUpdate) -> None:
        event = message.event
        if isinstance(event, ReplyChunk):
            await self._show_chunk(event)
        elif isinstance(event, PromptProgress):
            if self._reply_view is not None:
                self.query_one(StatusBar).show_prompt_progress(event)
        elif isinstance(event, ReplyEnded):
            await self._finish_reply(event)
        else:
            await self._reply_failed(event)

    async def _show_chunk(self, chunk: ReplyChunk) -> None:
        if self._reply_view is None:
            return
        if chunk.tokens:
            self.query_one(ContextMeter).add_reply_tokens(chunk.tokens)
        if chunk.save_due and self._stream is not None:
            self.saver.save_progress(self._stream.text)
        if chunk.text:
            await self._reply_view.append(chunk.text)
        if chunk.tokens:
            self.reply_shown.publish(chunk.tokens)
        if self._stream is not None:
            self._stream.frame_s = self._pacer.frame_shown()

    async def _finish_reply(self, ended: ReplyEnded) -> None:
        view = self._reply_view
        if view is None:
            return
        finished = ended.finished
        if self._continuing:
            self._continuing = False
            self.session.end_continue(view.message, finished)
            await view.finish(view.message.content, view.message.stats)
        elif finished.stats.finish_reason == "stopped" and not finished.stats.generated_tokens:
            await self._stopped_reading(view)
            return
        else:
            self.session.end_reply(view.message, finished)
            await view.finish(finished.text, finished.stats)
        self._mark_branches([view])
        self._reply_view = self._stream = None
        self.refresh_bindings()
        self.query_one(StatusBar).show_reply(finished.stats)
        if self.settings.sampling.repeatable and self.engine is not None:
            # While the user reads: the same seed then gives the same next reply
            # (or continuation) whether this conversation stays in memory, is
            # resumed or reopened.
            start_thread("rebatch", _rebatch_quietly, self.engine)
        self._schedule_prefill()  # for what was typed while the reply streamed
        if finished.error is not None:
            # The connection to a model server dropped mid-reply: what came is kept.
            self.notify(
                f"{finished.error} The reply so far is kept.",
                title="Reply cut off",
                severity="error",
                timeout=15,
                markup=False,
            )
        if finished.stats.finish_reason == "context_full":
            self.notify(
                "The context window is full: the reply was cut off. "
                "Start a new conversation (Ctrl+N).",
                severity="warning",
            )

    async def _stopped_reading(self, view: AssistantMessageView) -> None:
        """Esc while the prompt was evaluated: no reply, and none is kept (the
        user's message is; what was evaluated stays in the KV cache)."""
        self._reply_view = self._stream = None
        self.refresh_bindings()
        self.session.drop_reply(view.message)
        await view.finish("", None)
        await view.remove()
        self.query_one(StatusBar).show_stopped_reading()
        self.notify(
            "Stopped while reading the prompt. Your message is kept; Ctrl+L answers it, "
            "reading only what was not read yet.",
            timeout=8,
        )
        # No prefill: it would read the rest in the background, which Esc declined.

    async def _reply_failed(self, failed: ReplyFailed) -> None:
        view = self._reply_view
        self._reply_view = self._stream = None
        self.refresh_bindings()
        if view is not None and self._continuing:
            # The reply stays as it was: nothing of it is dropped.
            self._continuing = False
            self.session.end_continue_failed(view.message)
            await view.finish(view.message.content, view.message.stats)
            self.notify(failed.error, severity="error", timeout=10, markup=False)
            self.query_one(StatusBar).show_no_reply()
            return
        if view is not None:
            self.session.drop_reply(view.message)
            await view.finish("", None)
            await view.remove()
        messages = self.conversation.messages
        fresh = bool(messages) and not self.conversation.tree.children(messages[-1])
        if failed.prompt_too_long or (failed.server_failed and fresh):
            # Nothing is lost: the message goes back into the box, to be
            # shortened or sent again once the server answers.
            last = self.session.take_back_last_message()
            views = self.query_one(ConversationView).message_views()
            if last is not None and views and views[-1].message is last:
                await views[-1].remove()
            box = self.query_one(PromptBox)
            if last is not None and not box.text.strip():
                box.text = last.content
                self.draft.put_back(last.attachments, last.content)
        self.notify(failed.error, severity="error", timeout=10, markup=False)
        self.query_one(StatusBar).show_no_reply()
        if self.engine is not None:
            self.query_one(StatusBar).show_model(self.engine.info)

    def action_stop(self) -> None:
        """Esc: stop the reply, take back a message waiting for the model, or
        stop editing a message (the draft comes back)."""
        if self._stream is not None:
            self._stream.cancel()
        elif not self._take_back_waiting():
            self._stop_editing()

    def stop_generating(self) -> None:
        """End the reply within one token (its end arrives, and is saved, as
        usual). The reply so far is saved now too: on quit, a reply whose prompt
        is still being evaluated does not end before the app does."""
        if self._stream is not None:
            self._stream.cancel()
            self.saver.save_progress(self._stream.text)

    async def action_regenerate(self) -> None:
        """A new reply in place of the selected one (else the last one). The old
        reply stays as an alternative: alt+←/→ switches between them."""
        if self.generating:
            self.notify(
                "Wait for the reply to finish, or press Esc to stop it.", severity="warning"
            )
            return
        if self.engine is None:
            self.notify("No model is loaded.", severity="warning")
            return
        selected = self._selected_message()
        reply = selected if selected and selected.role == "assistant" else self.session.last_reply()
        if reply is None:
            self.notify("There is no reply to regenerate yet.", severity="warning")
            return
        shown = self.session.cut_before(reply)
        plan = self._plan(None)
        if plan is None or plan.problem:
            self.session.restore_branch(shown)
            self.notify(plan.problem or "" if plan else "No model is loaded.", severity="error")
            return
        await self.query_one(ConversationView).follow_branch(self.conversation.messages)
        await self._start_reply(plan)

    async def action_continue_reply(self) -> None:
        """Ctrl+L: the last reply goes on where it was cut short (max tokens, Esc),
        in the same message, the KV cache that holds it reused. When the last
        message is the user's (its reply stopped while the prompt was read), it
        is answered, reading only what was not read yet."""
        if self.generating:
            self.notify(
                "Wait for the reply to finish, or press Esc to stop it.", severity="warning"
            )
            return
        engine = self.engine
        if engine is None:
            self.notify("No model is loaded.", severity="warning")
            return
        messages = self.conversation.messages
        reply = self.session.continuable_reply()
        answering = bool(messages) and messages[-1].role == "user"
        if reply is None and not answering:
            self.notify(
                "Only a reply cut short (by max tokens or Esc) can be continued.",
                severity="warning",
            )
            return
        if reply is not None and self.conversation.tree.children(reply):
            self.notify(
                "This reply has messages after it in another branch; regenerate it "
                "(Ctrl+R) instead.",
                severity="warning",
            )
            return
        plan = self._plan(None)
        if plan is None or plan.problem:
            self.notify(plan.problem or "" if plan else "No model is loaded.", severity="error")
            return
        self._select(None)
        if reply is None:
            await self._start_reply(plan)
            return
        views = self.query_one(ConversationView).message_views()
        view = views[-1] if views else None
        if not isinstance(view, AssistantMessageView) or view.message is not reply:
            return  # not shown: nothing to stream into
        self.session.begin_continue(reply, plan)
        self._mark_views(views)
        self.query_one(ContextMeter).show(MeterState.from_plan(plan))
        view.start_stream()
        self.query_one(ConversationView).anchor()
        self._reply_view = view
        self._continuing = True
        self._stream_reply(engine, plan, continue_text=reply.content)

    # Branches: alternatives of a message, editing, forking.

    def _mark_branches(self, views: list[MessageView]) -> None:
        """Show, on each view, which of its message's alternatives it is."""
        for view in views:
            if view.message.role != "system":
                alternatives = self.session.alternatives(view.message)
                if len(alternatives) > 1 or view.has_class("branched"):
                    position = index_of(alternatives, view.message)
                    view.show_branch(position + 1, len(alternatives))
                    view.add_class("branched")

    def _selected_message(self) -> Message | None:
        """The message the user selected (a click, alt+↑/↓), if any."""
        for view in self.query_one(ConversationView).message_views():
            if view.has_class("selected") and view.message.role != "system":
                return view.message
        return None

    def _select(self, view: MessageView | None) -> None:
        for other in self.query_one(ConversationView).message_views():
            other.set_class(other is view, "selected")
        if view is not None:
            view.show_copy_button()
            view.scroll_visible(animate=False)

    @on(MessageView.Selected)
    def _on_message_clicked(self, event: MessageView.Selected) -> None:
        self._select(event.view)

    def action_select_message(self, step: int) -> None:
        """alt+↑/↓: select the message above or below (from none: the newest);
        below the newest, none is selected."""
        views = [
            view
            for view in self.query_one(ConversationView).message_views()
            if view.message.role != "system"
        ]
        if not views:
            return
        current = next((i for i, view in enumerate(views) if view.has_class("selected")), None)
        index = (len(views) - 1 if step < 0 else None) if current is None else current + step
        if index is None or index >= len(views):
            self._select(None)
        else:
            self._select(views[max(0, index)])

    def action_pick_model(self) -> None:
        """F8: the model picker; the model chosen is loaded, the conversation stays."""
        from chat.ui.screens.model_picker import ModelPickerScreen

        model = self._models.model
        loaded = model.path if model is not None and model.server is None else None

        def chosen(path: Path | None) -> None:
            if path is not None:
                self.post_message(SwitchModelRequested(path))

        self.app.push_screen(ModelPickerScreen(self.session.defaults.model, loaded), chosen)

    # Copying out, and writing in an editor.

    def _message_to_copy(self) -> Message | None:
        """The selected message, else the last reply."""
        selected = self._selected_message()
        if selected is not None:
            return selected
        return next(
            (m for m in reversed(self.conversation.messages) if m.role == "assistant"), None
        )

    def action_copy_message(self) -> None:
        """F5: copy the selected message (else the last reply)."""
        from chat.ui.clipboard import copy_text

        message = self._message_to_copy()
        if message is None:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        what = "the reply" if message.role == "assistant" else "your message"
        copy_text(self.app, message.content, what)

    def code_blocks_to_copy(self) -> list[CodeBlock]:
        """The code blocks of the selected reply (else the last), for the palette."""
        from chat.ui.clipboard import code_blocks

        message = self._message_to_copy()
        if message is None or message.role != "assistant":
            return []
        return code_blocks(message.content, markdown_parser())

    def action_copy_code(self, index: int) -> None:
        from chat.ui.clipboard import copy_text

        blocks = self.code_blocks_to_copy()
        if not 0 <= index < len(blocks):
            self.notify("That code block is no longer there.", severity="warning")
            return
        copy_text(self.app, blocks[index].code, f"code block {index + 1}")

    @on(CopyButton.Pressed)
    def _on_copy_pressed(self, event: CopyButton.Pressed) -> None:
        from chat.ui.clipboard import copy_text

        event.stop()
        copy_text(self.app, event.text(), event.what)

    def action_compose_in_editor(self) -> None:
        """Ctrl+G: write the message in the user's editor; its text comes back to
        the prompt box (unchanged if the editor fails)."""
        from textual.app import SuspendNotSupported

        from chat.ui.editor import EditorError, edit_text

        box = self.query_one(PromptBox)
        try:
            with self.app.suspend():
                text = edit_text(box.text)
        except SuspendNotSupported:
            self.notify(
                "An editor cannot be opened from here (this terminal cannot be handed over).",
                severity="warning",
            )
            return
        except EditorError as error:
            self.notify(str(error), severity="error", timeout=10, markup=False)
            return
        box.text = text
        box.move_cursor(box.document.end)
        box.focus()

    def _branch_point(self) -> Message | None:
        """The message whose alternatives alt+←/→ switches between: the selected
        one, else the newest shown that has alternatives."""
        selected = self._selected_message()
        if selected is not None:
            return selected
        for message in reversed(self.conversation.messages):
            if len(self.session.alternatives(message)) > 1:
                return message
        return None

    def _busy(self) -> bool:
        if self.generating:
            self.notify(
                "Wait for the reply to finish, or press Esc to stop it.", severity="warning"
            )
            return True
        return False

    async def action_switch_branch(self, step: int) -> None:
        if self._busy():
            return
        message = self._branch_point()
        if message is None or len(self.session.alternatives(message)) < 2:
            self.notify(
                "No alternatives here yet: edit a message (F3) or regenerate a reply "
                "(Ctrl+R), and the one it replaces is kept as an alternative.",
                timeout=6,
            )
            return
        self._stop_editing()
        target = self.session.show_alternative(message, step)
        if target is None:
            return  # already the first (or the last) one
        await self._show_branch(target)

    @on(BranchSwitch.Clicked)
    async def _on_branch_clicked(self, event: BranchSwitch.Clicked) -> None:
        event.stop()
        if self._busy():
            return
        self._stop_editing()
        target = self.session.show_alternative(event.message, event.step)
        if target is not None:
            await self._show_branch(target)

    async def _show_branch(self, target: Message) -> None:
        """The conversation shows another branch: views, window and meter follow."""
        view = self.query_one(ConversationView)
        await view.follow_branch(self.conversation.messages)
        views = view.message_views()
        self._mark_branches(views)
        self._select(next((v for v in views if v.message is target), None))
        self.refresh_bindings()
        self.recount_meter()
        self._schedule_prefill()

    def action_edit_message(self) -> None:
        """F3: edit the selected message (else your last one). A message of
        yours is edited in the prompt box and sent as a new branch; a reply is
        edited in a dialog and becomes an alternative the conversation goes on
        from. The original stays either way."""
        if self._busy():
            return
        message = self._selected_message()
        if message is None:
            message = next(
                (m for m in reversed(self.conversation.messages) if m.role == "user"), None
            )
        if message is None:
            self.notify("There is no message to edit yet.", severity="warning")
            return
        if message.role == "assistant":
            self._edit_reply(message)
            return
        box = self.query_one(PromptBox)
        draft = self._editing[1] if self._editing is not None else box.text
        if self._editing is None:
            self._picked_before_edit = self.draft.picked
        # The message's own files come with it (those its text names come again).
        self.draft.picked = []
        self.draft.put_back(message.attachments, message.content)
        self._editing = (message, draft)
        box.text = message.content
        box.move_cursor(box.document.end)
        box.focus()
        banner = self.query_one("#editing", Static)
        banner.update(
            Content(
                "Editing your message: Enter sends it as a new branch, the original is "
                "kept · Esc cancels"
            )
        )
        banner.display = True
        self.refresh_bindings()

    def _stop_editing(self) -> None:
        """Stop editing: the draft the box held before comes back."""
        if self._editing is None:
            return
        _, draft = self._editing
        self._editing = None
        self.draft.picked = self._picked_before_edit
        self.query_one("#editing").display = False
        self.refresh_bindings()
        box = self.query_one(PromptBox)
        box.text = draft
        box.move_cursor(box.document.end)

    async def _send_edited(self, text: str, box: PromptBox) -> None:
        """Send the edited message as a new branch beside the original."""
        assert self._editing is not None
        original, draft = self._editing
        if not any(m is original for m in self.conversation.messages):
            self._editing = None
            self.query_one("#editing").display = False
            self.notify("The message being edited is no longer shown.", severity="warning")
            return
        attached = self._attached(text)
        if attached is None:
            return
        shown = self.session.cut_before(original)
        plan = self._plan_to_send(prompt_text(text, attached.attachments))
        if plan is None:
            self.session.restore_branch(shown)
            return
        self._editing = None
        self.draft.picked = self._picked_before_edit
        self.query_one("#editing").display = False
        self.refresh_bindings()
        box.text = draft
        box.move_cursor(box.document.end)
        await self.query_one(ConversationView).follow_branch(self.conversation.messages)
        await self._send(text, plan, attached.attachments)

    def _edit_reply(self, reply: Message) -> None:
        from chat.ui.screens.dialogs import EditReplyScreen

        async def edited(text: str | None) -> None:
            if text is None or text == reply.content or self.generating:
                return
            if not any(m is reply for m in self.conversation.messages):
                return
            new = self.session.edit_reply(reply, text)
            await self._show_branch(new)
            self.notify("Reply edited: the conversation goes on from the edited text.")

        self.app.push_screen(EditReplyScreen(reply.content), edited)

    async def action_fork(self) -> None:
        """F4: the branch shown, up to the selected message (else all of it),
        becomes a new saved conversation, which is then shown."""
        if self._busy():
            return
        message = self._selected_message()
        if message is None and self.conversation.messages:
            message = self.conversation.messages[-1]
        if message is None:
            self.notify("There is nothing to fork yet.", severity="warning")
            return
        self._stop_editing()
        self.session.fork_at(message)
        system = self.conversation.system_prompt
        view = self.query_one(ConversationView)
        await view.show_messages(
            Message("system", system) if system else None, self.conversation.messages
        )
        self.recount_meter()
        self._schedule_prefill()
        self.refresh_bindings()
        self.notify(f"Forked: {self.conversation.title}", timeout=6, markup=False)

    # The seed.

    def action_pin_seed(self) -> None:
        seed = self.session.last_seed()
        if seed is None:
            self.notify("There is no reply yet, so no seed to pin.", severity="warning")
            return
        self.session.defaults.sampling.seed = seed
        self.notify(
            f"Seed pinned to {seed}: Ctrl+R now regenerates the same reply. "
            "Save it in Settings (F2) to keep it; clear it there for random seeds.",
            timeout=8,
        )

    def action_random_seed(self) -> None:
        self.session.defaults.sampling.seed = None
        self.notify("Each reply now gets a new random seed.")

    def defaults_changed(self) -> None:
        """The settings pane changed the defaults (see `ChatSession.defaults_changed`)."""
        self.session.defaults_changed()

    # Presets: a system prompt with sampling settings, for this conversation.

    def action_choose_preset(self) -> None:
        """F9: the presets, in the command palette."""
        from textual.command import CommandPalette

        self.app.push_screen(
            CommandPalette(providers=[PresetCommands], placeholder="Search for presets…")
        )

    async def use_preset(self, name: str) -> None:
        """Continue this conversation with the preset called `name` (see
        `ChatSession.use_preset`); the view shows its system prompt, the meter
        counts it."""
        preset = find_preset(self.presets, name)
        if preset is None:
            self.notify(f"There is no preset called {name!r}.", severity="warning", markup=False)
            return
        if self._busy():
            return
        self._stop_editing()
        before = self.conversation.system_prompt
        self.session.use_preset(preset)
        self._show_preset()
        system = self.conversation.system_prompt
        if system != before:
            view = self.query_one(ConversationView)
            await view.show_messages(
                Message("system", system) if system else None, self.conversation.messages
            )
            self._mark_branches(view.message_views())
        self.recount_meter()
        self._schedule_prefill()
        text = f"Preset {preset.name}" + (f": {preset.summary()}" if preset.summary() else ".")
        if system != before and self.conversation.messages:
            text += " The next reply reads the whole conversation again, with the new prompt."
        self.notify(text, timeout=6, markup=False)

    def _show_preset(self) -> None:
        self.query_one(StatusBar).show_preset(self.conversation.preset)

    # Conversations: new, saved, opened, exported.

    async def action_new_conversation(self) -> None:
        if self.generating:
            self.notify("Stop the reply first (Esc).", severity="warning")
            return
        self._take_back_waiting()  # it was for the conversation that goes
        self._stop_editing()
        self.session.new_conversation()
        self._show_preset()
        await self.query_one(ConversationView).clear()
        await self._show_system_prompt()
        self.refresh_bindings()
        self.query_one(PromptBox).focus()
        self.refresh_meter()
        self._find_changed()

    # Saving: problems, retries, another window.

    # While writes fail, they are tried again this often.
    SAVE_RETRY_S = 3.0

    def _report_save_problem(self, text: str) -> None:
        if text.startswith("Saving again"):
            self.notify(text, title="Saving", timeout=6, markup=False)
            return
        self.notify(text, title="Not saving", severity="error", timeout=15, markup=False)

    def _not_saving_changed(self, reason: str | None) -> None:
        """The saver's lasting reason changed: the status bar shows it until
        saving works again, and failed writes are retried meanwhile."""
        self.query_one(StatusBar).show_not_saving(reason)
        if self.saver.failing and self._save_retry is None:
            self._save_retry = self.set_interval(self.SAVE_RETRY_S, self._retry_saving)
        elif not self.saver.failing and self._save_retry is not None:
            self._save_retry.stop()
            self._save_retry = None

    def _retry_saving(self) -> None:
        self.session.save_all(self._stream.text if self._stream is not None else None)

    def _changed_elsewhere(self) -> None:
        """Another window added to this conversation: this one's turns are not
        written until the user reloads it or continues as a fork."""
        from chat.ui.screens.dialogs import ConfirmScreen

        title = self.conversation.title or "This conversation"
        question = ConfirmScreen(
            "Changed in another window",
            f"“{title}” was continued in another kvchat window since this one opened "
            "it, so this window's new messages are not saved there. Reload it to see "
            "both (your last message goes back into the box), or continue here as a "
            "new conversation, a fork with everything shown here.",
            "Continue as a fork",
            "Reload",
        )
        self.app.push_screen(question, self._settle_conflict)

    async def _settle_conflict(self, fork: bool | None) -> None:
        if fork:
            self.session.fork()
            self.notify(
                f"Saved as a new conversation: {self.conversation.title}",
                timeout=8,
                markup=False,
            )
            return
        conv_id = self.conversation.id
        unsaved = [m for m in self.conversation.messages if m.id is None and m.role == "user"]
        if self.generating:
            self.action_stop()
            await self._reply_done()
        if conv_id is None:
            return
        if await self.open_conversation(conv_id) and unsaved:
            box = self.query_one(PromptBox)
            if not box.text.strip():
                box.text = unsaved[-1].content

    async def _reply_done(self) -> None:
        """Wait until the reply streaming now has ended (after Esc)."""
        while self.generating:
            await asyncio.sleep(0.02)

    def attach_store(self, store: Store) -> None:
        """Save from now on; what was said before is saved now."""
        self.saver.attach(store)
        self.session.save_all()

    def stop_saving(self, reason: str) -> None:
        """Go on without a database: `reason` stays in the status bar."""
        self.saver.stop_saving(reason)

    async def open_conversation(self, conversation: int | Conversation) -> bool:
        """Show a saved conversation and continue it with its own system prompt and
        sampling settings (for this conversation only: see chat.session.chat_session).

        `conversation`: its id in the store, or one already loaded from the store
        (its saved sampling settings are then not read: the defaults apply).
        """
        if self.generating:
            self.notify("Stop the reply first (Esc).", severity="warning")
            return False
        self._take_back_waiting()  # it was for the conversation that goes
        self._stop_editing()
        sampling: dict[str, Any] = {}
        if isinstance(conversation, int):
            try:
                conversation, sampling = self.session.load(conversation)
            except KvchatError as error:
                self.notify(str(error), severity="error", timeout=10, markup=False)
                return False
        self.session.open(conversation, sampling)
        self._show_preset()
        system = conversation.system_prompt
        await self.query_one(ConversationView).show_messages(
            Message("system", system) if system else None, conversation.messages
        )
        self._mark_branches(self.query_one(ConversationView).message_views())
        self.refresh_bindings()
        self.query_one(PromptBox).focus()
        self.recount_meter()
        self._schedule_prefill()  # its first reply then evaluates only the new message
        if self.engine is None:
            self._check_model_when_loaded = True
        else:
            self._offer_model_switch()
        return True

    def _offer_server(self, url: str, engine: Engine) -> None:
        """The conversation was made on a model server not in use: offer to reconnect."""
        conversation = self.conversation
        made_with = conversation.model_name or "its model"

        def answer(reconnect: bool | None) -> None:
            if reconnect:
                self.post_message(
                    SwitchServerRequested(
                        url, conversation.backend, conversation.model_name or None
                    )
                )

        from chat.ui.screens.dialogs import ConfirmScreen

        question = ConfirmScreen(
            "Made on a model server",
            f"This conversation was made with {made_with} on the {conversation.backend} "
            f"server at {url}. It continues with {engine.info.name} unless you reconnect.",
            "Reconnect to the server",
            f"Keep {engine.info.name}",
        )
        self.app.push_screen(question, answer)

    def _offer_model_switch(self) -> None:
        """Say so when the conversation was made with another model, and offer it."""
        server_url, engine = self.session.made_on_another_server(), self.engine
        if server_url is not None and engine is not None:
            self._offer_server(server_url, engine)
            return
        path = self.session.made_with_another_model()
        if path is None or engine is None:
            return
        made_with = self.conversation.model_name or path.name
        if not path.is_file():
            self.notify(
                f"This conversation was made with {made_with} ({path}), which is no longer "
                f"there; it continues with {engine.info.name}.",
                severity="warning",
                timeout=10,
                markup=False,
            )
            return

        def answer(switch: bool | None) -> None:
            if switch:
                self.post_message(SwitchModelRequested(path))

        from chat.ui.screens.dialogs import ConfirmScreen

        question = ConfirmScreen(
            "Made with another model",
            f"This conversation was made with {made_with} ({path}). The loaded model is "
            f"{engine.info.name} ({engine.info.path}). The conversation continues on "
            "either; switch models?",
            f"Switch to {made_with}",
            f"Keep {engine.info.name}",
        )
        self.app.push_screen(question, answer)

    def action_open_conversations(self) -> None:
        if self.generating:
            self.notify("Stop the reply first (Esc).", severity="warning")
            return
        store = self.saver.store
        if store is None:
            reason = self.saver.not_saving or "the database is not open yet"
            self.notify(
                f"Saved conversations are not available: {reason}.",
                severity="warning",
                markup=False,
            )
            return
        from chat.ui.screens.conversations import ConversationsScreen

        browser = ConversationsScreen(
            store, open_id=self.conversation.id, resumable=self.session.resumable()
        )

        async def chosen(choice: OpenChoice) -> None:
            conv_id = self.conversation.id
            if conv_id is not None and conv_id in browser.renamed:
                self.conversation.title = browser.renamed[conv_id]
            if isinstance(choice, int):
                await self.open_conversation(choice)
            elif choice == "new" or (conv_id is not None and conv_id in browser.deleted):
                await self.action_new_conversation()

        self.app.push_screen(browser, chosen)

    def action_export(self) -> None:
        if not self.conversation.messages:
            self.notify("There is nothing to export yet.", severity="warning")
            return
        from chat.conversations.transcript import export_conversation

        try:
            path = export_conversation(self.conversation, asdict(self.settings.sampling))
        except KvchatError as error:
            self.notify(str(error), severity="error", timeout=10, markup=False)
            return
        self.notify(f"Exported to {path}", title="Conversation exported", timeout=10, markup=False)

    # Links in replies open only once the user confirms.

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        from chat.ui.screens.link_confirm import LinkConfirmScreen

        event.stop()
        self.app.push_screen(LinkConfirmScreen(event.href))


def _prefill_quietly(
    engine: Engine, session: ChatSession, text: str, prefill: bool, exact: bool
) -> None:
    """A prefill is only a head start: if it fails, sending the text meets the
    same problem and reports it, so nothing is shown from here. A saved KV cache
    of the conversation (instant resume) is put back first when it holds more."""
    with contextlib.suppress(Exception):
        prompt = session.prefill_prompt(text)
        if prompt is not None:
            if session.resume_pending:
                session.resume(engine, *prompt)
            if prefill:
                engine.prefill(*prompt, exact=exact)


def _rebatch_quietly(engine: Engine) -> None:
    """Like a prefill, only a head start: the next reply does it if this fails."""
    with contextlib.suppress(Exception):
        engine.rebatch_reply()
