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
from textual.widgets import Footer, LoadingIndicator, Markdown, Static

from chat.config import Settings
from chat.conversation import Conversation, Message
from chat.engine.base import Engine, Finished, TokenEvent
from chat.errors import KvchatError, PromptTooLongError
from chat.ui.messages import ReplyFailed, ReplyFinished, ReplyToken
from chat.ui.screens.link_confirm import LinkConfirmScreen
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar


class ChatScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("ctrl+n", "new_conversation", "New chat"),
    ]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.engine: Engine | None = None
        self.conversation = Conversation(system_prompt=settings.chat.system_prompt)
        self._cancel = threading.Event()
        self._reply_view: AssistantMessageView | None = None
        self._reply_thread: threading.Thread | None = None

    @property
    def generating(self) -> bool:
        return self._reply_view is not None

    def compose(self) -> ComposeResult:
        yield ConversationView(id="conversation")
        yield Static("", id="notice", markup=False)
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
        await self._remove_loading()
        self.query_one("#notice").display = False
        self.query_one(StatusBar).show_model(engine.info)

    async def show_reloading(self, name: str) -> None:
        """Another model is loading to replace this one: no replies until `show_model`
        (or `show_problem`); the conversation stays as it is."""
        self.engine = None
        self.query_one(StatusBar).show_reloading(name)

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
        event.prompt_box.clear()
        message = Message("user", event.text.strip("\n"))
        self.conversation.messages.append(message)
        await self.query_one(ConversationView).add_message(message)
        await self._start_reply()

    async def _start_reply(self) -> None:
        assert self.engine is not None
        reply = Message("assistant", "")
        self._reply_view = await self.query_one(ConversationView).start_reply(reply)
        self._cancel = threading.Event()
        self.query_one(StatusBar).show_generating()
        self._reply_thread = threading.Thread(
            target=self._generate,
            args=(self.engine, self.conversation.chat_messages(), replace(self.settings.sampling)),
            name="kvchat-generate",
            daemon=True,  # never keeps the process alive after Ctrl+Q
        )
        self._reply_thread.start()

    def _generate(self, engine: Engine, messages: list[dict[str, str]], sampling: object) -> None:
        """Runs in the reply thread; only posts messages to the screen."""
        try:
            for event in engine.stream_reply(messages, sampling, self._cancel):  # type: ignore[arg-type]
                if isinstance(event, TokenEvent):
                    if event.text:
                        self.post_message(ReplyToken(event.text))
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
            await self._reply_view.append(message.text)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        view = self._reply_view
        if view is None:
            return
        finished = message.finished
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
        messages.pop()
        views = self.query_one(ConversationView).message_views()
        await views[-1].remove()
        await self._start_reply()

    async def action_new_conversation(self) -> None:
        if self.generating:
            self.notify("Stop the reply first (Esc).", severity="warning")
            return
        self.conversation = Conversation(system_prompt=self.settings.chat.system_prompt)
        await self.query_one(ConversationView).clear()
        await self._show_system_prompt()
        self.query_one(PromptBox).focus()

    def stop_generating(self) -> None:
        """Called on quit: end the reply thread within one token."""
        self._cancel.set()

    # -- links in replies ---------------------------------------------------

    @on(Markdown.LinkClicked)
    def _on_link_clicked(self, event: Markdown.LinkClicked) -> None:
        event.stop()
        self.app.push_screen(LinkConfirmScreen(event.href))
