"""The chat screen: the conversation, the prompt box and the status bar.

It composes, binds keys and draws; it does not decide. What the user does
goes to the `Turn` (chat.session.turn: sending, the reply's life, stopping,
prefill; no Textual), which reports what happens as events; the turn drawer
(chat.ui.turn_drawer) turns them into views, status and notices. The
conversation and its settings are the session's (chat.session.chat_session).
Opening, forking, exporting and saving problems are the conversation flow's
(chat.ui.screens.conversation_flow); what the meter shows is planned by
chat.ui.meter_planner; the model's state is shown by chat.ui.model_status;
the message being written (its box, files and the edit under way) is the
draft's (chat.ui.widgets.draft).

The flow of one turn: the draft posts `Submitted`; the turn adds and saves
the user's message and starts the reply in a background thread; its events
come back as `TurnUpdate`s (the reply started, its text, its end), and the
drawer streams the text into the reply's Markdown view.

The screen is given what it works with by the app: the turn, the model
loader (the one owner of the engine) and the conversation flow. It asks the
app for anything else by posting a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver
from chat.engine.protocol import Engine
from chat.runtime.model_loader import ModelLoader
from chat.session.chat_session import ChatSession
from chat.session.draft_attachments import DraftAttachments
from chat.session.thinking_controls import set_thinking_budget, switch_thinking
from chat.session.turn import Refused, Turn
from chat.settings.presets import Preset, find_preset
from chat.settings.schema import Settings
from chat.ui.commands import ChatScreenCommands, PresetCommands
from chat.ui.frame_timer import DrawsWhenAsked
from chat.ui.markdown_parser import markdown_parser
from chat.ui.messages import SwitchModelRequested, TurnUpdate
from chat.ui.meter_planner import MeterPlanner
from chat.ui.model_status import ModelStatus
from chat.ui.screens.chat_keys import CHAT_KEYS, TOOL_CALLS_KEY
from chat.ui.screens.conversation_flow import ConversationFlow
from chat.ui.screens.help import HelpScreen
from chat.ui.screens.tool_flow import ToolFlow
from chat.ui.terminal_scroll import ScrollingCompositor
from chat.ui.textual_fixes import textual_known
from chat.ui.turn_drawer import TurnDrawer, tell, withdraw
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.copy_button import CopyButton
from chat.ui.widgets.draft import Draft
from chat.ui.widgets.keys_footer import KeysFooter
from chat.ui.widgets.message_view import AssistantMessageView, BranchSwitch, MessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar

# The screens this one opens (conversations, token view, dialogs) and the
# exporter are imported where they are opened: the first frame does not need
# them, and startup to the first frame is a measured target (chat.bench).
if TYPE_CHECKING:
    from textual.widgets import Markdown

    from chat.ui.clipboard import CodeBlock
    from chat.ui.widgets.find_bar import FindBar


class ChatScreen(DrawsWhenAsked, Screen[None]):
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
        if textual_known():
            self._compositor = ScrollingCompositor()
        self.turn = turn
        self.conversations = conversations
        self.presets = list(presets)
        """What "Use preset" (F9, the palette) offers (chat.settings.presets)."""
        self.drawer = TurnDrawer(self, turn)
        turn.listener = self.drawer.listener
        self.meter = MeterPlanner(self, turn, lambda: self.generating)
        turn.counting = self.meter.counting
        self.model_status = ModelStatus(self, turn, self.meter, conversations.model_ready)
        self._models = models
        self._find_bar: FindBar | None = None
        """Mounted the first time Ctrl+F opens it."""
        self._refusals_up: list[Refused] = []
        """Sends refused since the last message sent: their notices may still be up."""
        self.tool_flow = ToolFlow(self, turn.tools) if turn.tools is not None else None
        """The question before a call, the calls' blocks, the tools pane."""
        self.message_draft = Draft(turn)
        """The message being written (held: `check_action` reads it for every
        key binding each time the footer asks which keys do something, and a
        query walks the whole screen)."""

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
        return self.turn.generating or self.drawer.drawing

    async def reply_drawn(self) -> None:
        """Return once no reply is being drawn (the turn's end shown)."""
        await self.drawer.reply_drawn()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The keys that do something now. Those that a reply's start and end
        change (Esc, Regen, Edit, Copy) stay in the footer, dimmed while they
        do nothing (None, as Textual's footer draws a disabled key): a footer
        whose keys came and went was laid out and drawn again as each reply
        started and ended (with a footer that never changed, a 300-token
        reply cost the UI thread 9 % less: docs/performance.md, "The
        footer's keys stay"), and the keys moved under the mouse. The branch
        key shows once a message has alternatives."""
        editing = self.message_draft.editing is not None
        has_messages = bool(self.conversation.messages)
        if action == "stop":
            return (self.generating or self.turn.waiting is not None or editing) or None
        if action == "copy_message":
            return has_messages or None
        if action in ("regenerate", "edit_message", "fork"):
            return (not self.generating and has_messages) or None
        if action == "switch_branch":
            if len(self.conversation.tree) <= len(self.conversation.messages):
                return False
            return (not self.generating and not editing) or None
        return True

    def compose(self) -> ComposeResult:
        yield ConversationView(id="conversation")
        yield Static("", id="notice", markup=False)
        yield ContextMeter(id="meter")
        with self.message_draft:
            yield from Draft.parts()
        yield StatusBar(id="status")
        # Compact (styled in app.tcss); narrower than 120 columns it leads with
        # help, settings and models.
        yield KeysFooter()

    async def on_mount(self) -> None:
        self.query_one("#notice").display = False
        if isinstance(self._compositor, ScrollingCompositor):
            self._compositor.scroll_view = self.query_one(ConversationView)
        if self.turn.tools is not None and self.turn.tools.configured:
            key, action, description = TOOL_CALLS_KEY
            self._bindings.bind(key, action, description, show=False)
        box = self.query_one(PromptBox)
        self.turn.typed = lambda: box.text
        self.turn.editing = lambda: self.message_draft.editing  # the meter counts what it sends
        self.query_one(PromptBox).focus()
        await self._show_system_prompt()

    def on_screen_suspend(self) -> None:
        if isinstance(self._compositor, ScrollingCompositor):
            self._compositor.covered()

    async def _show_system_prompt(self) -> None:
        if self.conversation.system_prompt:
            await self.query_one(ConversationView).add_message(
                Message("system", self.conversation.system_prompt)
            )

    # What the user writes (chat.ui.widgets.draft).

    @on(Draft.Submitted)
    def _on_submitted(self, event: Draft.Submitted) -> None:
        draft = self.message_draft
        if event.editing is not None:
            refused = self.turn.send_edit(event.editing, event.text)
        else:
            refused = self.turn.send(event.text)
        if refused is not None:
            tell(self, refused)
            self._refusals_up.append(refused)
            self.refresh_bindings()
            return
        # Sent: why an earlier try was refused (a file it named, a model not
        # loaded yet) no longer stands, and its notice goes with it.
        for earlier in self._refusals_up:
            withdraw(self, earlier)
        self._refusals_up.clear()
        if event.editing is not None and self.turn.waiting is None:
            draft.edit_sent()
        else:
            draft.sent()
        self.refresh_bindings()

    @on(PromptBox.PageRequested)
    def _on_page_requested(self, event: PromptBox.PageRequested) -> None:
        view = self.query_one(ConversationView)
        if event.step < 0:
            view.scroll_page_up(animate=False)
        else:
            view.scroll_page_down(animate=False)

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
                self.message_draft.attach(path)

        self.app.push_screen(AttachFileScreen(self.draft.base), chosen)

    def action_remove_attachments(self) -> None:
        """Take every file off the message being written."""
        self.message_draft.remove_attachments()

    def action_compose_in_editor(self) -> None:
        """Ctrl+G: write the message in the user's editor."""
        self.message_draft.compose_in_editor()

    def stop_editing(self) -> None:
        self.message_draft.stop_editing()

    def show_not_saving(self, reason: str | None) -> None:
        self.query_one(StatusBar).show_not_saving(reason)

    def put_in_empty_box(self, text: str) -> None:
        box = self.query_one(PromptBox)
        if not box.text.strip():
            box.text = text

    def put_back_unsent(self, text: str) -> None:
        self.message_draft.put_back(text)

    async def on_turn_update(self, message: TurnUpdate) -> None:
        await self.drawer.draw(message.event)

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
            tell(self, refused)

    def action_continue_reply(self) -> None:
        """Ctrl+L: the last reply goes on where it was cut short (see `Turn.continue_reply`)."""
        if self._busy():
            return
        refused = self.turn.continue_reply()
        if refused is not None:
            tell(self, refused)

    # Branches: alternatives of a message, selection, editing, forking.

    def _mark_views(self, views: list[MessageView]) -> None:
        ConversationView.mark_window(views, self.session.window_states)

    def _mark_branches(self, views: list[MessageView]) -> None:
        ConversationView.mark_branches(views, self.session.alternatives)

    @on(ConversationView.PageShown)
    def _on_page_shown(self, event: ConversationView.PageShown) -> None:
        self._mark_branches(event.views)
        if self.session.budget is not None and self.session.has_messages_outside:
            self._mark_views(event.views)
        else:
            self.meter.count_shown(event.views)
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

    async def action_switch_branch(self, step: int, message: Message | None = None) -> None:
        """alt+←/→: the previous or next alternative of `message` (else of the
        selected one, else of the newest shown that has alternatives)."""
        if not self._busy():
            self.stop_editing()
            target = message if message is not None else self._selected_message()
            await self.conversations.switch_branch(target, step)

    @on(BranchSwitch.Clicked)
    async def _on_branch_clicked(self, event: BranchSwitch.Clicked) -> None:
        event.stop()
        await self.action_switch_branch(event.step, event.message)

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
            self.message_draft.edit(message)
            self.refresh_bindings()

    async def action_fork(self) -> None:
        """F4: the branch shown, up to the selected message (else all of it),
        becomes a new saved conversation, which is then shown."""
        if not self._busy():
            await self.conversations.fork(self._selected_message())

    # The conversation as a whole: shown anew (after the conversation flow
    # changed it, one method per case), new, opened, exported.

    async def _show_all(self) -> None:
        """The session's conversation drawn anew, its system prompt first."""
        system = self.conversation.system_prompt
        await self.query_one(ConversationView).show_messages(
            Message("system", system) if system else None, self.conversation.messages
        )

    def _read_ahead(self) -> None:
        self.meter.recount()
        self.turn.schedule_prefill()  # its first reply then evaluates only the new message

    async def show_new_conversation(self) -> None:
        """An empty conversation (its system prompt alone)."""
        self._restore_tools()
        self._show_last_reply_figures()
        self.query_one(StatusBar).show_preset(self.conversation.preset)
        await self.query_one(ConversationView).clear()
        await self._show_system_prompt()
        self.refresh_bindings()
        self.query_one(PromptBox).focus()
        self.meter.refresh()
        self._find_changed()

    async def show_opened_conversation(self) -> None:
        """A conversation opened from the store (or the browser)."""
        self._restore_tools()
        self._show_last_reply_figures()
        self.query_one(StatusBar).show_preset(self.conversation.preset)
        await self._show_all()
        self._mark_branches(self.query_one(ConversationView).message_views())
        self.refresh_bindings()
        self.query_one(PromptBox).focus()
        self._read_ahead()

    async def show_forked_conversation(self) -> None:
        """A fork of the conversation shown (its preset and tools stay)."""
        self._restore_tools()
        self._show_last_reply_figures()
        await self._show_all()
        self._read_ahead()
        self.refresh_bindings()

    def _show_last_reply_figures(self) -> None:
        """The status bar's figures are the last reply's of the conversation
        now shown (none in a new one), not those of the one before."""
        messages = self.conversation.messages
        last = messages[-1] if messages else None
        status = self.query_one(StatusBar)
        if last is not None and last.role == "assistant" and last.stats is not None:
            status.show_reply(last.stats)
        else:
            status.show_no_reply()

    async def show_preset_used(self, system_before: str) -> None:
        """The same conversation with a preset: redrawn only if its system prompt
        changed from `system_before`."""
        self.query_one(StatusBar).show_preset(self.conversation.preset)
        if self.conversation.system_prompt != system_before:
            await self._show_all()
            self._mark_branches(self.query_one(ConversationView).message_views())
        self._read_ahead()

    async def action_new_conversation(self) -> None:
        await self.conversations.new()

    async def open_conversation(self, conversation: int | Conversation) -> bool:
        """See `ConversationFlow.open`."""
        return await self.conversations.open(conversation)

    def action_open_conversations(self) -> None:
        self.conversations.browse()

    def action_export(self) -> None:
        self.conversations.export()

    def defaults_changed(self, sampling: Mapping[str, Any]) -> None:
        """The settings pane changed the defaults (see `ChatSession.defaults_changed`)."""
        self.session.defaults_changed(sampling)

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

    # Tools (chat.ui.tool_flow).

    def _restore_tools(self) -> None:
        """Another conversation: the tools it turned off stay off (a new one
        has all on when a server is configured)."""
        if self.turn.tools is not None:
            self.turn.tools.restore(self.conversation.tool_switches)

    def tool_switches_changed(self) -> None:
        """The tools pane or the palette turned tools on or off: kept with the
        conversation, and counted by the meter."""
        if self.turn.tools is not None:
            self.session.switch_tools(self.turn.tools.switches())
        self.tools_changed()

    def tools_changed(self) -> None:
        """A tool server started, failed or stopped, or a switch changed: the
        meter counts what the next reply is offered; the tools pane, if open,
        shows it."""
        self.refresh_meter()
        from chat.ui.screens.tools import ToolsScreen

        for screen in self.app.screen_stack:
            if isinstance(screen, ToolsScreen):
                screen.show_servers()

    def action_tools_pane(self) -> None:
        """The palette: the tools pane (chat.ui.screens.tools)."""
        if self.turn.tools is None:
            return
        from chat.ui.screens.tools import ToolsScreen

        self.app.push_screen(
            ToolsScreen(self.turn.tools, self.tool_switches_changed, self.turn.why_no_tools())
        )

    def action_toggle_tool_calls(self) -> None:
        """alt+c: unfold or fold the tool calls of the selected reply, else of
        the newest that called a tool."""
        if self.tool_flow is not None:
            self.tool_flow.toggle_calls()

    def action_switch_tools(self) -> None:
        """The palette: tools on or off for this conversation."""
        if self.tool_flow is not None:
            self.notify(self.tool_flow.switch(), timeout=6)
            self.tool_switches_changed()  # the tool definitions are part of the prompt

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
        if not (isinstance(parent, MessageView) and parent.streaming):
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
