"""The chat screen: the conversation, the prompt box and the status bar.

The flow of one turn: the prompt box posts `Submitted`; the user's message is
added; a daemon thread runs `engine.stream_reply` and posts `ReplyToken`s and
one `ReplyFinished`; the screen streams them into the reply's Markdown view.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, LoadingIndicator, Markdown, Static

from chat.config import SamplingSettings, Settings
from chat.context import ContextBudget, WindowPlan
from chat.conversation import Conversation, Message
from chat.engine.base import Engine, Finished, TokenEvent
from chat.errors import KvchatError, PromptTooLongError
from chat.ui.messages import ReplyFailed, ReplyFinished, ReplyToken
from chat.ui.screens.link_confirm import LinkConfirmScreen
from chat.ui.screens.token_view import TokenViewCommands, open_token_view
from chat.ui.widgets.context_meter import HELP as CONTEXT_HELP
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar


class ChatScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("ctrl+n", "new_conversation", "New chat"),
        Binding("f1", "context_help", "Context help"),
        Binding("ctrl+t", "token_view", "Tokens"),
    ]
    COMMANDS = {TokenViewCommands}

    # Typing updates the meter after this pause, not on every keystroke.
    METER_DEBOUNCE_S = 0.15

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.engine: Engine | None = None
        self.conversation = Conversation(system_prompt=settings.chat.system_prompt)
        self._cancel = threading.Event()
        self._reply_view: AssistantMessageView | None = None
        self._reply_thread: threading.Thread | None = None
        self.budget: ContextBudget | None = None
        self._meter_timer: Timer | None = None

    @property
    def generating(self) -> bool:
        return self._reply_view is not None

    def compose(self) -> ComposeResult:
        yield ConversationView(id="conversation")
        yield Static("", id="notice", markup=False)
        yield ContextMeter(id="meter")
        yield PromptBox(id="prompt")
        yield StatusBar(id="status")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#notice").display = False
        self.query_one(PromptBox).focus()
        await self._show_system_prompt()

    async def _show_system_prompt(self) -> None:
        if self.conversation.system_prompt:
            await self.query_one(ConversationView).add_message(
                Message("system", self.conversation.system_prompt)
            )

    # -- model state, driven by the app ------------------------------------

    async def show_loading(self, name: str) -> None:
        self.query_one(StatusBar).show_loading(name)
        notice = self.query_one("#notice", Static)
        notice.update(Content(f"Loading model {name}…  You can type meanwhile."))
        notice.set_classes("loading")
        notice.display = True
        await self.mount(LoadingIndicator(id="loading"), before=notice)

    async def show_model(self, engine: Engine) -> None:
        self.engine = engine
        self.budget = ContextBudget(engine.tokenize_chat, engine.info.n_ctx)
        await self._remove_loading()
        self.query_one("#notice").display = False
        self.query_one(StatusBar).show_model(engine.info)
        self.refresh_meter()

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

    async def _remove_loading(self) -> None:
        for indicator in self.query("#loading"):
            await indicator.remove()

    # -- sending, streaming, stopping ---------------------------------------

    @on(PromptBox.Submitted)
    async def _on_submitted(self, event: PromptBox.Submitted) -> None:
        if self.generating:
            self.notify(
                "A reply is still being generated. Press Esc to stop it, or wait; "
                "your text stays in the box.",
                severity="warning",
            )
            return
        if self.engine is None:
            self.notify("No model is loaded yet; your text stays in the box.", severity="warning")
            return
        text = event.text.strip("\n")
        plan = self._plan(text)
        if plan is None:
            return
        if plan.problem:
            # Nothing is sent and nothing is lost: the text stays in the box.
            self.notify(plan.problem, severity="error", timeout=15)
            return
        event.prompt_box.clear()
        message = Message("user", text, token_count=plan.new - self._generation_prompt())
        self.conversation.messages.append(message)
        await self.query_one(ConversationView).add_message(message)
        await self._start_reply(plan)

    def _plan(self, new_text: str | None) -> WindowPlan | None:
        if self.budget is None:
            return None
        chat = self.settings.chat
        return self.budget.plan(
            self.conversation.system_prompt,
            self.conversation.messages,
            new_text,
            self.settings.sampling.max_tokens,
            chat.overflow,
        )

    def _generation_prompt(self) -> int:
        assert self.budget is not None
        messages = self.conversation.messages
        return self.budget.generation_prompt_tokens(
            self.conversation.system_prompt, messages[0] if messages else None
        )

    def _prompt_messages(self, plan: WindowPlan) -> list[dict[str, str]]:
        """What this turn sends: the system prompt, the earlier messages that
        fit, and the newest message."""
        messages = self.conversation.messages
        head = self.conversation.chat_messages(upto=0)
        return (
            head
            + [messages[i].as_chat_dict() for i in plan.included]
            + [messages[-1].as_chat_dict()]
        )

    def _mark_window(self, plan: WindowPlan) -> None:
        """Show which messages are outside the window this turn, and each one's tokens."""
        assert self.budget is not None
        messages = self.conversation.messages
        counts = self.budget.count_messages(self.conversation.system_prompt, messages)
        position = {id(message): i for i, message in enumerate(messages)}
        outside = {id(messages[i]) for i in plan.left_out}
        for view in self.query_one(ConversationView).message_views():
            index = position.get(id(view.message))
            if view.message.role == "system":
                view.message.token_count = plan.system
            elif index is not None:
                view.message.token_count = counts[index]
            view.show_outside_window(id(view.message) in outside)

    def refresh_meter(self) -> None:
        """Recount the window for the text in the prompt box (idle or typing)."""
        if self.budget is None or self.generating:
            return
        plan = self._plan(self.query_one(PromptBox).text)
        if plan is not None:
            self.query_one(ContextMeter).show(MeterState.from_plan(plan))
            for view in self.query_one(ConversationView).message_views():
                if view.message.role == "system" and view.message.token_count != plan.system:
                    view.message.token_count = plan.system
                    view.refresh_header()

    @on(PromptBox.Changed)
    def _on_prompt_changed(self) -> None:
        if self._meter_timer is not None:
            self._meter_timer.stop()
        self._meter_timer = self.set_timer(self.METER_DEBOUNCE_S, self.refresh_meter)

    def action_token_view(self) -> None:
        open_token_view(self, self.conversation.messages)

    def action_context_help(self) -> None:
        self.notify(CONTEXT_HELP, title="Why the whole conversation is sent again", timeout=20)

    async def _start_reply(self, plan: WindowPlan) -> None:
        assert self.engine is not None
        self._mark_window(plan)
        self.query_one(ContextMeter).show(MeterState.from_plan(plan))
        reply = Message("assistant", "")
        self._reply_view = await self.query_one(ConversationView).start_reply(reply)
        self._cancel = threading.Event()
        self.query_one(StatusBar).show_generating()
        self._reply_thread = threading.Thread(
            target=self._generate,
            args=(
                self.engine,
                self._prompt_messages(plan),
                replace(self.settings.sampling),
                self.settings.chat.record_token_probs,
            ),
            name="kvchat-generate",
            daemon=True,  # never keeps the process alive after Ctrl+Q
        )
        self._reply_thread.start()

    def _generate(
        self,
        engine: Engine,
        messages: list[dict[str, str]],
        sampling: SamplingSettings,
        record_probs: bool,
    ) -> None:
        """Runs in the reply thread; only posts messages to the screen."""
        try:
            for event in engine.stream_reply(messages, sampling, self._cancel, record_probs):
                if isinstance(event, TokenEvent):
                    counted = 1 if event.token_id >= 0 else 0  # -1: held-back text at the end
                    if event.text or counted:
                        self.post_message(ReplyToken(event.text, counted))
                elif isinstance(event, Finished):
                    self.post_message(ReplyFinished(event))
        except PromptTooLongError as error:
            self.post_message(ReplyFailed(str(error), prompt_too_long=True))
        except KvchatError as error:
            self.post_message(ReplyFailed(str(error)))
        except Exception as error:  # a bug or a llama.cpp failure: say so, keep the app alive
            self.post_message(ReplyFailed(f"Generation failed: {error}"))

    async def on_reply_token(self, message: ReplyToken) -> None:
        if self._reply_view is not None:
            if message.tokens:
                self.query_one(ContextMeter).add_reply_tokens(message.tokens)
            if message.text:
                await self._reply_view.append(message.text)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        view = self._reply_view
        if view is None:
            return
        finished = message.finished
        view.message.token_probs = list(finished.choices) or None
        await view.finish(finished.text, finished.stats)
        self.conversation.messages.append(view.message)
        self._reply_view = None
        self.query_one(StatusBar).show_reply(finished.stats)
        if finished.stats.finish_reason == "context_full":
            self.notify(
                "The context window is full: the reply was cut off. "
                "Start a new conversation (Ctrl+N).",
                severity="warning",
            )

    async def on_reply_failed(self, message: ReplyFailed) -> None:
        view = self._reply_view
        self._reply_view = None
        if view is not None:
            await view.finish("", None)
            await view.remove()
        if message.prompt_too_long and self.conversation.messages:
            # Nothing is lost: the message goes back into the box to be shortened.
            last = self.conversation.messages.pop()
            views = self.query_one(ConversationView).message_views()
            if views and views[-1].message is last:
                await views[-1].remove()
            box = self.query_one(PromptBox)
            if not box.text.strip():
                box.text = last.content
        self.notify(message.error, severity="error", timeout=10)
        if self.engine is not None:
            self.query_one(StatusBar).show_model(self.engine.info)

    def action_stop(self) -> None:
        if self.generating:
            self._cancel.set()

    async def action_regenerate(self) -> None:
        if self.generating:
            self.notify(
                "Wait for the reply to finish, or press Esc to stop it.", severity="warning"
            )
            return
        if self.engine is None:
            self.notify("No model is loaded.", severity="warning")
            return
        messages = self.conversation.messages
        if not messages or messages[-1].role != "assistant":
            self.notify("There is no reply to regenerate yet.", severity="warning")
            return
        last_reply = messages.pop()
        plan = self._plan(None)
        if plan is None or plan.problem:
            messages.append(last_reply)
            self.notify(plan.problem or "" if plan else "No model is loaded.", severity="error")
            return
        views = self.query_one(ConversationView).message_views()
        await views[-1].remove()
        await self._start_reply(plan)

    async def action_new_conversation(self) -> None:
        if self.generating:
            self.notify("Stop the reply first (Esc).", severity="warning")
            return
        self.conversation = Conversation(system_prompt=self.settings.chat.system_prompt)
        await self.query_one(ConversationView).clear()
        await self._show_system_prompt()
        self.query_one(PromptBox).focus()
        self.refresh_meter()

    def stop_generating(self) -> None:
        """Called on quit: end the reply thread within one token."""
        self._cancel.set()

    # -- links in replies ---------------------------------------------------

    @on(Markdown.LinkClicked)
    def _on_link_clicked(self, event: Markdown.LinkClicked) -> None:
        event.stop()
        self.app.push_screen(LinkConfirmScreen(event.href))
