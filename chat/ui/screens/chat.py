"""The chat screen: the conversation, the prompt box and the status bar.

It draws; it does not decide. What the user does goes to the `Turn`
(chat.session.turn: sending, the reply's life, stopping, prefill; no
Textual), which reports what happens as events; the screen turns them into
views, status and notices. The conversation and its settings are the
session's (chat.session.chat_session). Opening, forking, exporting and
saving problems are the conversation flow's (chat.ui.screens.conversation_flow);
what the meter shows is planned by chat.ui.meter_planner; the message being
written (its box, files and the edit under way) is the draft's
(chat.ui.widgets.draft).

The flow of one turn: the draft posts `Submitted`; the turn adds and saves
the user's message and starts the reply in a background thread; its events
come back as `TurnUpdate`s (the reply started, its text, its end), and the
screen streams the text into the reply's Markdown view.

The screen is given what it works with by the app: the turn, the model
loader (the one owner of the engine) and the conversation flow. It asks the
app for anything else by posting a message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.screen import Screen
from textual.signal import Signal
from textual.widgets import LoadingIndicator, Static

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver
from chat.engine.protocol import Engine
from chat.runtime.model_loader import ModelLoader
from chat.session.chat_session import ChatSession
from chat.session.draft_attachments import DraftAttachments
from chat.session.thinking_controls import set_thinking_budget, switch_thinking
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
from chat.settings.presets import Preset, find_preset
from chat.settings.schema import Settings
from chat.ui.commands import ChatScreenCommands, PresetCommands
from chat.ui.messages import SwitchModelRequested, TurnUpdate
from chat.ui.meter_planner import MeterPlanner
from chat.ui.screens.chat_keys import CHAT_KEYS
from chat.ui.screens.conversation_flow import ConversationFlow
from chat.ui.screens.help import HelpScreen
from chat.ui.untrusted import shown
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.draft import Draft
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
    from chat.ui.widgets.find_bar import FindBar


class ChatScreen(Screen[None]):
    BINDINGS = CHAT_KEYS
    COMMANDS = {ChatScreenCommands, PresetCommands}

    def __init__(
        self,
        turn: Turn,
        models: ModelLoader,
        conversations: ConversationFlow,
        presets: Sequence[Preset] = (),
    ) -> None:
        super().__init__()
        self.turn = turn
        turn.listener = self._turn_moved
        self.conversations = conversations
        self.presets = list(presets)
        """What "Use preset" (F9, the palette) offers (chat.settings.presets)."""
        self.meter = MeterPlanner(self, turn, lambda: self.generating)
        turn.counting = self.meter.counting
        self._models = models
        self._reply_view: AssistantMessageView | None = None
        """The reply being drawn."""
        self._undrawn = 0
        """Replies the turn started whose end is not drawn yet (the screen draws
        a little after the turn: its events queue up as messages)."""
        self._reply_drawn = asyncio.Event()
        self._reply_drawn.set()
        self.reply_shown: Signal[int] = Signal(self, "reply_shown")
        """Published each time reply tokens are on screen, with how many (the
        benchmark measures decode speed where the user sees it)."""
        self.check_model_when_loaded = False
        """A conversation was opened before any model was ready: once one is,
        say whether it was made with another."""
        self._find_bar: FindBar | None = None
        """Mounted the first time Ctrl+F opens it."""

    @property
    def session(self) -> ChatSession:
        return self.turn.session

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
    def draft(self) -> DraftAttachments:
        """The files attached to the message being written."""
        return self.turn.draft

    @property
    def engine(self) -> Engine | None:
        """The model replies use now (None while none is loaded or another loads)."""
        return self.session.engine

    @property
    def generating(self) -> bool:
        """A reply is being generated, or its end not drawn yet."""
        return self.turn.generating or self._undrawn > 0

    async def reply_drawn(self) -> None:
        """Return once no reply is being drawn (the turn's end shown)."""
        await self._reply_drawn.wait()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The footer shows the keys that do something now (so that they fit on
        one line at 100 columns): Esc while there is something to stop, the
        branch keys once a message has alternatives, and so on."""
        drafts = self.query(Draft)
        editing = bool(drafts) and drafts.first().editing is not None
        if action == "stop":
            return self.generating or self.turn.waiting is not None or editing
        if action == "copy_message":
            return bool(self.conversation.messages)
        if action in ("regenerate", "edit_message", "fork"):
            return not self.generating and bool(self.conversation.messages)
        if action == "switch_branch":
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
        with Draft(self.turn):
            yield from Draft.parts()
        yield StatusBar(id="status")
        # Compact (styled in app.tcss); narrower than 120 columns it leads with
        # help, settings and models.
        yield KeysFooter()

    async def on_mount(self) -> None:
        self.query_one("#notice").display = False
        box = self.query_one(PromptBox)
        self.turn.typed = lambda: box.text
        self.query_one(PromptBox).focus()
        await self._show_system_prompt()

    async def _show_system_prompt(self) -> None:
        if self.conversation.system_prompt:
            await self.query_one(ConversationView).add_message(
                Message("system", self.conversation.system_prompt)
            )

    def _tell(self, refused: Refused) -> None:
        self.notify(
            refused.text,
            title=refused.title,
            severity="warning" if refused.severity == "warning" else "error",
            timeout=refused.timeout,
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
        self.meter.recount()
        self.turn.schedule_prefill()  # for what was typed while the model loaded
        # After the caller (the app, taking the model in) is done with it.
        self.call_later(self.turn.send_waiting)
        if self.check_model_when_loaded:
            self.check_model_when_loaded = False
            self.conversations.offer_model_switch()

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
        if self.turn.take_back_waiting() is not None:
            self.notify(
                "The model did not load, so your message was not sent: it is back in the box.",
                severity="warning",
                timeout=10,
            )

    async def _remove_loading(self) -> None:
        for indicator in self.query("#loading"):
            await indicator.remove()

    # What the user writes (chat.ui.widgets.draft).

    @on(Draft.Submitted)
    def _on_submitted(self, event: Draft.Submitted) -> None:
        draft = self.query_one(Draft)
        if event.editing is not None:
            refused = self.turn.send_edit(event.editing, event.text)
        else:
            refused = self.turn.send(event.text)
        if refused is not None:
            self._tell(refused)
        elif event.editing is not None and self.turn.waiting is None:
            draft.edit_sent()
        else:
            draft.sent()
        self.refresh_bindings()

    @on(PromptBox.Changed)
    def _on_prompt_changed(self) -> None:
        self.meter.typed()
        self.turn.schedule_prefill()

    @on(Draft.AttachmentsChanged)
    def _on_attachments_changed(self) -> None:
        self.meter.refresh()

    def refresh_meter(self) -> None:
        self.meter.refresh()

    def recount_meter(self) -> None:
        self.meter.recount()

    def action_attach_file(self) -> None:
        """The palette's "Attach a file…": a file picker; the file chosen is
        attached to the message being written."""
        from chat.ui.screens.attach_file import AttachFileScreen

        def chosen(path: str | None) -> None:
            if path is not None:
                self.query_one(Draft).attach(path)

        self.app.push_screen(AttachFileScreen(self.draft.base), chosen)

    def action_remove_attachments(self) -> None:
        """Take every file off the message being written."""
        self.query_one(Draft).remove_attachments()

    def action_compose_in_editor(self) -> None:
        """Ctrl+G: write the message in the user's editor."""
        self.query_one(Draft).compose_in_editor()

    def stop_editing(self) -> None:
        self.query_one(Draft).stop_editing()

    def show_not_saving(self, reason: str | None) -> None:
        self.query_one(StatusBar).show_not_saving(reason)

    def put_in_empty_box(self, text: str) -> None:
        box = self.query_one(PromptBox)
        if not box.text.strip():
            box.text = text

    # What the turn reports.

    def _turn_moved(self, event: TurnEvent) -> None:
        """The turn's listener: each event is drawn in turn, as a message."""
        if isinstance(event, TurnStarted):
            self._undrawn += 1
            self._reply_drawn.clear()
        self.post_message(TurnUpdate(event))

    async def on_turn_update(self, message: TurnUpdate) -> None:
        event: TurnEvent = message.event
        if isinstance(event, TurnText):
            await self._show_text(event)
        elif isinstance(event, TurnProgress):
            if self._is_drawing(event.reply):
                self.query_one(StatusBar).show_prompt_progress(event.progress)
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

    def _is_drawing(self, reply: Message) -> bool:
        return self._reply_view is not None and self._reply_view.message is reply

    async def _show_started(self, started: TurnStarted) -> None:
        view = self.query_one(ConversationView)
        if started.kind != "regenerate":
            self._select(None)  # a new turn: the keys apply to the newest messages again
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
        self._mark_views(views)
        self.query_one(ContextMeter).show(MeterState.from_plan(started.plan))
        if reply_view is None:
            reply_view = await view.start_reply(started.reply)
        self._reply_view = reply_view
        self.query_one(StatusBar).show_generating()
        self.refresh_bindings()

    async def _show_text(self, text: TurnText) -> None:
        if not self._is_drawing(text.reply):
            return
        assert self._reply_view is not None
        if text.tokens:
            self.query_one(ContextMeter).add_reply_tokens(text.tokens, text.thinking_tokens)
        if text.text or text.thinking or text.thinking_tokens:
            await self._reply_view.append(text.text, text.thinking, text.thinking_tokens)
        if text.tokens:
            self.reply_shown.publish(text.tokens)
        self.turn.frame_shown()

    def _drawn(self) -> None:
        """The reply's end is drawn (or it had no view): the screen takes the next one."""
        self._reply_view = None
        self._undrawn = max(0, self._undrawn - 1)
        if not self._undrawn:
            self._reply_drawn.set()
        self.refresh_bindings()

    async def _show_ended(self, ended: TurnEnded) -> None:
        view = self._reply_view
        if view is None or view.message is not ended.reply:
            self._drawn()
            return
        reply, finished = ended.reply, ended.finished
        await view.finish(reply.content, reply.stats, reply.thinking)
        self._drawn()
        self._mark_branches([view])
        self.query_one(StatusBar).show_reply(finished.stats)
        if finished.error is not None:
            # The connection to a model server dropped mid-reply: what came is kept.
            self.notify(
                f"{finished.error} The reply so far is kept.",
                title="Reply cut off",
                severity="error",
                timeout=15,
            )
        if finished.stats.finish_reason == "context_full":
            self.notify(
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
        self.query_one(StatusBar).show_stopped_reading()
        self.notify(
            "Stopped while reading the prompt. Your message is kept; Ctrl+L answers it, "
            "reading only what was not read yet.",
            timeout=8,
        )

    async def _show_failed(self, failed: TurnFailed) -> None:
        view = self._reply_view if self._is_drawing(failed.reply) else None
        status = self.query_one(StatusBar)
        if failed.continued:
            if view is not None:  # the reply stays as it was
                await view.finish(failed.reply.content, failed.reply.stats)
            self._drawn()
            self.notify(failed.error, severity="error", timeout=10)
            status.show_no_reply()
            return
        if view is not None:
            await view.finish("", None)
            await view.remove()
        last = failed.taken_back
        if last is not None:
            views = self.query_one(ConversationView).message_views()
            if views and views[-1].message is last:
                await views[-1].remove()
            self.query_one(Draft).put_back_sent(last)
        self._drawn()
        self.notify(failed.error, severity="error", timeout=10)
        status.show_no_reply()
        if self.engine is not None:
            status.show_model(self.engine.info)

    async def _show_waiting(self, text: str) -> None:
        """A message sent while the model loads, shown until the model is ready."""
        view = self.query_one(ConversationView)
        await view.mount(WaitingMessage(text))
        view.anchor()
        self.refresh_bindings()

    async def _waiting_over(self, over: WaitingOver) -> None:
        for waiting in self.query(WaitingMessage):
            await waiting.remove()
        self.refresh_bindings()
        if over.taken_back:
            self.query_one(Draft).put_back(over.text)
        if over.refused is not None:
            self._tell(over.refused)

    # Stopping, regenerating, continuing.

    def action_stop(self) -> None:
        """Esc: stop the reply, take back a message waiting for the model, or
        stop editing a message (the draft comes back)."""
        if not self.turn.stop() and self.turn.take_back_waiting() is None:
            self.stop_editing()

    def _busy(self) -> bool:
        if self.generating:
            self.notify(
                "Wait for the reply to finish, or press Esc to stop it.", severity="warning"
            )
            return True
        return False

    def action_regenerate(self) -> None:
        """A new reply in place of the selected one (else the last one). The old
        reply stays as an alternative: alt+←/→ switches between them."""
        if self._busy():
            return
        refused = self.turn.regenerate(self._selected_message())
        if refused is not None:
            self._tell(refused)

    def action_continue_reply(self) -> None:
        """Ctrl+L: the last reply goes on where it was cut short (see `Turn.continue_reply`)."""
        if self._busy():
            return
        refused = self.turn.continue_reply()
        if refused is not None:
            self._tell(refused)

    # Branches: alternatives of a message, selection, editing, forking.

    def _mark_views(self, views: list[MessageView]) -> None:
        ConversationView.mark_window(views, self.session.window_states)

    def _mark_branches(self, views: list[MessageView]) -> None:
        ConversationView.mark_branches(views, self.session.alternatives)

    @on(ConversationView.EarlierShown)
    def _on_earlier_shown(self, event: ConversationView.EarlierShown) -> None:
        self._mark_branches(event.views)
        if self.session.budget is not None and self.session.has_messages_outside:
            self._mark_views(event.views)
        self._find_changed()

    def _selected_message(self) -> Message | None:
        return self.query_one(ConversationView).selected_message()

    def _select(self, view: MessageView | None) -> None:
        self.query_one(ConversationView).select(view)

    @on(MessageView.Selected)
    def _on_message_clicked(self, event: MessageView.Selected) -> None:
        self._select(event.view)

    def action_select_message(self, step: int) -> None:
        """alt+↑/↓: select the message above or below."""
        self.query_one(ConversationView).select_step(step)

    async def action_switch_branch(self, step: int) -> None:
        """alt+←/→: the previous or next alternative of the selected message,
        else of the newest shown that has alternatives."""
        if not self._busy():
            self.stop_editing()
            await self.conversations.switch_branch(self._selected_message(), step)

    @on(BranchSwitch.Clicked)
    async def _on_branch_clicked(self, event: BranchSwitch.Clicked) -> None:
        event.stop()
        if not self._busy():
            self.stop_editing()
            await self.conversations.switch_branch(event.message, event.step)

    async def show_branch(self, target: Message) -> None:
        """The conversation shows another branch: views, window and meter follow."""
        view = self.query_one(ConversationView)
        await view.follow_branch(self.conversation.messages)
        self._mark_branches(view.message_views())
        view.select_message(target)
        self.refresh_bindings()
        self.meter.recount()
        self.turn.schedule_prefill()

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
        elif message.role == "assistant":
            self.conversations.edit_reply(message)
        else:
            self.query_one(Draft).edit(message)
            self.refresh_bindings()

    async def action_fork(self) -> None:
        """F4: the branch shown, up to the selected message (else all of it),
        becomes a new saved conversation, which is then shown."""
        if not self._busy():
            await self.conversations.fork(self._selected_message())

    # The conversation as a whole: shown anew, new, opened, exported.

    async def show_conversation(
        self,
        *,
        new: bool = False,
        forked: bool = False,
        preset: bool = False,
        system_changed: str | None = None,
    ) -> None:
        """Draw the session's conversation anew (after the conversation flow
        changed it): `new` an empty one, `forked` a fork of the one shown,
        `preset` the same with a preset (`system_changed`: the system prompt
        before it, to redraw only if it changed)."""
        view = self.query_one(ConversationView)
        system = self.conversation.system_prompt
        if not forked:
            self.query_one(StatusBar).show_preset(self.conversation.preset)
        if new:
            await view.clear()
            await self._show_system_prompt()
            self.refresh_bindings()
            self.query_one(PromptBox).focus()
            self.meter.refresh()
            self._find_changed()
            return
        if not preset or system != system_changed:
            await view.show_messages(
                Message("system", system) if system else None, self.conversation.messages
            )
            if not forked:
                self._mark_branches(view.message_views())
        if not (forked or preset):
            self.refresh_bindings()
            self.query_one(PromptBox).focus()
        self.meter.recount()
        self.turn.schedule_prefill()  # its first reply then evaluates only the new message
        if forked:
            self.refresh_bindings()

    async def action_new_conversation(self) -> None:
        await self.conversations.new()

    async def open_conversation(self, conversation: int | Conversation) -> bool:
        """See `ConversationFlow.open`."""
        return await self.conversations.open(conversation)

    def action_open_conversations(self) -> None:
        self.conversations.browse()

    def action_export(self) -> None:
        self.conversations.export()

    def defaults_changed(self) -> None:
        """The settings pane changed the defaults (see `ChatSession.defaults_changed`)."""
        self.session.defaults_changed()

    # The seed.

    def action_pin_seed(self) -> None:
        self.conversations.pin_seed()

    def action_random_seed(self) -> None:
        self.conversations.random_seed()

    # Presets: a system prompt with sampling settings, for this conversation.

    def action_choose_preset(self) -> None:
        """F9: the presets, in the command palette."""
        from textual.command import CommandPalette

        self.app.push_screen(
            CommandPalette(providers=[PresetCommands], placeholder="Search for presets…")
        )

    async def use_preset(self, name: str) -> None:
        """Continue this conversation with the preset called `name`."""
        preset = find_preset(self.presets, name)
        if preset is None:
            self.notify(f"There is no preset called {name!r}.", severity="warning")
            return
        if not self._busy():
            await self.conversations.use_preset(preset)

    def action_toggle_thinking(self) -> None:
        """alt+t: fold or unfold the thinking of the selected reply, else of the
        newest reply that thought."""
        views = [
            view
            for view in self.query_one(ConversationView).message_views()
            if isinstance(view, AssistantMessageView) and view.thinking.has_class("-shown")
        ]
        target = next((view for view in views if view.has_class("selected")), None)
        if target is None and views:
            target = views[-1]
        if target is None:
            self.notify("No reply shown here has thinking to unfold.", severity="warning")
            return
        target.thinking.folded = not target.thinking.folded

    def action_switch_thinking(self) -> None:
        """The palette: thinking on or off for this conversation."""
        self.notify(switch_thinking(self.session), timeout=6)
        self.recount_meter()  # thinking off renders another prompt

    def action_thinking_budget(self, budget: int) -> None:
        self.notify(set_thinking_budget(self.session, budget), timeout=6)
        self.recount_meter()

    # Finding, tokens, help, models.

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

    def action_pick_model(self) -> None:
        """F8: the model picker; the model chosen is loaded, the conversation stays."""
        from chat.ui.screens.model_picker import ModelPickerScreen

        model = self._models.model
        loaded = model.path if model is not None and model.server is None else None

        def chosen(path: Path | None) -> None:
            if path is not None:
                self.post_message(SwitchModelRequested(path))

        self.app.push_screen(ModelPickerScreen(self.session.defaults.model, loaded), chosen)

    # Copying out.

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
        from chat.ui.clipboard import copy_message

        copy_message(self.app, self._message_to_copy())

    def code_blocks_to_copy(self) -> list[CodeBlock]:
        """The code blocks of the selected reply (else the last), for the palette."""
        from chat.ui.clipboard import code_blocks

        message = self._message_to_copy()
        if message is None or message.role != "assistant":
            return []
        return code_blocks(message.content, markdown_parser())

    def action_copy_code(self, index: int) -> None:
        from chat.ui.clipboard import copy_code_block

        copy_code_block(self.app, self.code_blocks_to_copy(), index)

    @on(CopyButton.Pressed)
    def _on_copy_pressed(self, event: CopyButton.Pressed) -> None:
        from chat.ui.clipboard import copy_text

        event.stop()
        copy_text(self.app, event.text(), event.what)

    # Links in replies open only once the user confirms.

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        from chat.ui.screens.link_confirm import LinkConfirmScreen

        event.stop()
        self.app.push_screen(LinkConfirmScreen(event.href))
