"""Conversations from the user's side: a new one, one opened or forked, the
offer of the model it was made with, its export; and saving: problems told,
failed writes retried, another window that changed the same conversation.

Like the settings and database flows, this holds the steps and the dialogs;
the chat screen draws the result (`ChatScreen.show_opened_conversation` and
the like), and the
conversation itself is the session's (chat.session.chat_session), reached
through the turn (chat.session.turn), which must not be generating a reply
while the conversation changes under it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

from textual.app import App
from textual.timer import Timer

from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.conversations.unsent import take_unsent
from chat.engine.protocol import Engine
from chat.errors import KvchatError
from chat.session.chat_session import ChatSession
from chat.session.turn import Turn
from chat.settings.presets import Preset
from chat.settings.values import format_value
from chat.ui.messages import SwitchModelRequested, SwitchServerRequested

if TYPE_CHECKING:
    from chat.ui.screens.conversations import OpenChoice

STOP_FIRST = "Stop the reply first (Esc)."

SAVE_RETRY_S = 3.0
"""While writes fail, they are tried again this often."""


class ConversationScreen(Protocol):
    """What this flow asks of the chat screen (chat.ui.screens.chat)."""

    @property
    def generating(self) -> bool: ...

    async def show_new_conversation(self) -> None: ...

    async def show_opened_conversation(self) -> None: ...

    async def show_forked_conversation(self) -> None: ...

    async def show_preset_used(self, system_before: str) -> None: ...

    def stop_editing(self) -> None: ...

    async def show_branch(self, target: Message) -> None: ...

    def put_in_empty_box(self, text: str) -> None: ...

    def put_back_unsent(self, text: str) -> None: ...

    async def reply_drawn(self) -> None: ...

    def show_not_saving(self, reason: str | None) -> None: ...

    def set_interval(self, interval: float, callback: Any) -> Timer: ...


class ConversationFlow:
    def __init__(self, app: App[None]) -> None:
        """`show_on` gives it the turn and the screen: both are made after this
        flow, which the session's saver reports to."""
        self._app = app
        self._save_retry: Timer | None = None
        self._turn: Turn | None = None
        self._shown_on: ConversationScreen | None = None
        self._offer_when_loaded = False
        """A conversation was opened before any model was ready: once one is,
        say whether it was made with another."""
        self.flagged_sampling: dict[str, Any] = {}
        """Sampling settings given on the command line (`--max-tokens 40`):
        they apply to the conversation `--continue` or `--resume` reopens."""

    def show_on(self, screen: ConversationScreen, turn: Turn) -> None:
        self._shown_on, self._turn = screen, turn

    @property
    def _screen(self) -> ConversationScreen:
        assert self._shown_on is not None
        return self._shown_on

    @property
    def turn(self) -> Turn:
        assert self._turn is not None
        return self._turn

    @property
    def _session(self) -> ChatSession:
        return self.turn.session

    @property
    def _conversation(self) -> Conversation:
        return self._session.conversation

    def _busy(self) -> bool:
        if self._screen.generating:
            self._app.notify(STOP_FIRST, severity="warning")
            return True
        return False

    # New, opened, forked.

    async def new(self) -> None:
        if self._busy():
            return
        self.turn.take_back_waiting()  # it was for the conversation that goes
        self._screen.stop_editing()
        self._session.new_conversation()
        await self._screen.show_new_conversation()

    async def open(self, conversation: int | Conversation) -> bool:
        """Show a saved conversation and continue it with its own system prompt and
        sampling settings (for this conversation only: see chat.session.chat_session).

        `conversation`: its id in the store, or one already loaded from the store
        (its saved sampling settings are then not read: the defaults apply).
        """
        if self._busy():
            return False
        self.turn.take_back_waiting()  # it was for the conversation that goes
        self._screen.stop_editing()
        sampling: dict[str, Any] = {}
        if isinstance(conversation, int):
            try:
                conversation, sampling = self._session.load(conversation)
            except KvchatError as error:
                self._app.notify(str(error), severity="error", timeout=10)
                return False
        self._session.open(conversation, sampling)
        await self._screen.show_opened_conversation()
        self._put_back_unsent(conversation.id)
        if self._session.engine is None:
            self._offer_when_loaded = True
        else:
            self.offer_model_switch()
        return True

    def _put_back_unsent(self, conversation_id: int | None) -> None:
        """The message being written in this conversation when kvchat last
        quit (chat.conversations.unsent) comes back into the box."""
        if conversation_id is None:
            return
        text = take_unsent(lambda written_in: written_in == conversation_id)
        if text:
            self._screen.put_back_unsent(text)
            self._app.notify(
                "The message you were writing here when kvchat quit is back in the box."
            )

    def apply_flags(self) -> None:
        """The conversation `--continue` or `--resume` reopened keeps its own
        sampling settings, except those given on the command line: typed with
        it, they are meant for it. Said when they change what it had (saved
        with it from now on). Conversations opened later (Ctrl+O) keep theirs."""
        own = self._session.settings.sampling
        changed = {
            name: (getattr(own, name), value)
            for name, value in self.flagged_sampling.items()
            if getattr(own, name) != value
        }
        if not changed:
            return
        self._session.change_sampling(**{name: new for name, (_, new) in changed.items()})
        said = ", ".join(
            f"{name} {format_value(f'sampling.{name}', new)} (it had "
            f"{format_value(f'sampling.{name}', old)})"
            for name, (old, new) in changed.items()
        )
        self._app.notify(f"From the command line, for this conversation too: {said}.")

    def browse(self) -> None:
        """Ctrl+O: the saved conversations; the one chosen is opened."""
        if self._busy():
            return
        saver = self._session.saver
        store = saver.store
        if store is None:
            reason = saver.not_saving or "the database is not open yet"
            self._app.notify(
                f"Saved conversations are not available: {reason}.", severity="warning"
            )
            return
        from chat.ui.screens.conversations import ConversationsScreen

        browser = ConversationsScreen(
            store, open_id=self._conversation.id, resumable=self._session.resumable()
        )

        async def chosen(choice: OpenChoice) -> None:
            conv_id = self._conversation.id
            if conv_id is not None and conv_id in browser.renamed:
                self._conversation.title = browser.renamed[conv_id]
            if isinstance(choice, int):
                await self.open(choice)
            elif choice == "new" or (conv_id is not None and conv_id in browser.deleted):
                await self.new()

        self._app.push_screen(browser, chosen)

    async def fork(self, message: Message | None) -> None:
        """The branch shown, up to `message` (else all of it), becomes a new
        saved conversation, which is then shown."""
        if message is None and self._conversation.messages:
            message = self._conversation.messages[-1]
        if message is None:
            self._app.notify("There is nothing to fork yet.", severity="warning")
            return
        self._screen.stop_editing()
        self._session.fork_at(message)
        await self._screen.show_forked_conversation()
        self._app.notify(f"Forked: {self._conversation.title}", timeout=6)

    # Branches: every edit and regeneration keeps what it replaces.

    async def switch_branch(self, message: Message | None, step: int) -> None:
        """Show the previous (`step` -1) or next alternative of `message`
        (selected or clicked), else of the newest shown that has some."""
        session = self._session
        if message is None:
            newest_first = reversed(self._conversation.messages)
            message = next((m for m in newest_first if len(session.alternatives(m)) > 1), None)
        if message is None or len(session.alternatives(message)) < 2:
            self._app.notify(
                "No alternatives here yet: edit a message (F3) or regenerate a reply "
                "(Ctrl+R), and the one it replaces is kept as an alternative.",
                timeout=6,
            )
            return
        target = session.show_alternative(message, step)
        if target is not None:
            await self._screen.show_branch(target)

    def edit_reply(self, reply: Message) -> None:
        """A reply edited in a dialog becomes an alternative the conversation goes on from."""
        from chat.ui.screens.dialogs import EditReplyScreen

        async def edited(text: str | None) -> None:
            if text is None or text == reply.content or self._screen.generating:
                return
            if not any(m is reply for m in self._conversation.messages):
                return
            new = self._session.edit_reply(reply, text)
            await self._screen.show_branch(new)
            self._app.notify("Reply edited: the conversation goes on from the edited text.")

        self._app.push_screen(EditReplyScreen(reply.content), edited)

    async def use_preset(self, preset: Preset) -> None:
        """Continue this conversation with `preset` (see `ChatSession.use_preset`);
        the view shows its system prompt, the meter counts it."""
        self._screen.stop_editing()
        before = self._conversation.system_prompt
        self._session.use_preset(preset)
        await self._screen.show_preset_used(before)
        system = self._conversation.system_prompt
        summary = preset.summary()
        text = f"Preset {preset.name}" + (f": {summary}." if summary else ".")
        if system != before and self._conversation.messages:
            text += " The next reply reads the whole conversation again, with the new prompt."
        self._app.notify(text, timeout=6)

    def pin_seed(self) -> None:
        """Every reply from now on uses the last reply's seed (the defaults')."""
        seed = self._session.last_seed()
        if seed is None:
            self._app.notify("There is no reply yet, so no seed to pin.", severity="warning")
            return
        self._session.defaults.sampling.seed = seed
        self._app.notify(
            f"Seed pinned to {seed}: Ctrl+R now regenerates the same reply. "
            "Save it in Settings (F2) to keep it; clear it there for random seeds.",
            timeout=8,
        )

    def random_seed(self) -> None:
        self._session.defaults.sampling.seed = None
        self._app.notify("Each reply now gets a new random seed.")

    def export(self) -> None:
        conversation = self._conversation
        if not conversation.messages:
            self._app.notify("There is nothing to export yet.", severity="warning")
            return
        from chat.conversations.transcript import export_conversation

        try:
            path = export_conversation(conversation, asdict(self._session.settings.sampling))
        except KvchatError as error:
            self._app.notify(str(error), severity="error", timeout=10)
            return
        self._app.notify(f"Exported to {path}", title="Conversation exported", timeout=10)

    # The model a conversation was made with.

    def model_ready(self) -> None:
        """A model is ready: a conversation opened while none was is checked now."""
        if self._offer_when_loaded:
            self._offer_when_loaded = False
            self.offer_model_switch()

    def offer_model_switch(self) -> None:
        """Say so when the conversation was made with another model, and offer it."""
        session = self._session
        server_url, engine = session.made_on_another_server(), session.engine
        if server_url is not None and engine is not None:
            self._offer_server(server_url, engine)
            return
        path = session.made_with_another_model()
        if path is None or engine is None:
            return
        made_with = self._conversation.model_name or path.name
        if not path.is_file():
            self._app.notify(
                f"This conversation was made with {made_with} ({path}), which is no longer "
                f"there; it continues with {engine.info.name}.",
                severity="warning",
                timeout=10,
            )
            return

        def answer(switch: bool | None) -> None:
            if switch:
                self._app.post_message(SwitchModelRequested(path))

        from chat.ui.screens.dialogs import ConfirmScreen

        question = ConfirmScreen(
            "Made with another model",
            f"This conversation was made with {made_with} ({path}). The loaded model is "
            f"{engine.info.name} ({engine.info.path}). The conversation continues on "
            "either; switch models?",
            f"Switch to {made_with}",
            f"Keep {engine.info.name}",
        )
        self._app.push_screen(question, answer)

    def _offer_server(self, url: str, engine: Engine) -> None:
        """The conversation was made on a model server not in use: offer to reconnect."""
        conversation = self._conversation
        made_with = conversation.model_name or "its model"

        def answer(reconnect: bool | None) -> None:
            if reconnect:
                self._app.post_message(
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
        self._app.push_screen(question, answer)

    # Saving: the database, problems, retries, another window.

    def attach_store(self, store: Store) -> None:
        """Save from now on; what was said before is saved now."""
        self._session.saver.attach(store)
        self._session.save_all()

    def stop_saving(self, reason: str) -> None:
        """Go on without a database: `reason` stays in the status bar."""
        self._session.saver.stop_saving(reason)

    def report_save_problem(self, text: str) -> None:
        if text.startswith("Saving again"):
            self._app.notify(text, title="Saving", timeout=6)
            return
        self._app.notify(text, title="Not saving", severity="error", timeout=15)

    def not_saving_changed(self, reason: str | None) -> None:
        """The saver's lasting reason changed: the status bar shows it until
        saving works again, and failed writes are retried meanwhile."""
        self._screen.show_not_saving(reason)
        failing = self._session.saver.failing
        if failing and self._save_retry is None:
            self._save_retry = self._screen.set_interval(SAVE_RETRY_S, self.turn.save_all)
        elif not failing and self._save_retry is not None:
            self._save_retry.stop()
            self._save_retry = None

    def changed_elsewhere(self) -> None:
        """Another window added to this conversation: this one's turns are not
        written until the user reloads it or continues as a fork."""
        from chat.ui.screens.dialogs import ConfirmScreen

        title = self._conversation.title or "This conversation"
        question = ConfirmScreen(
            "Changed in another window",
            f"“{title}” was continued in another kvchat window since this one opened "
            "it, so this window's new messages are not saved there. Reload it to see "
            "both (your last message goes back into the box), or continue here as a "
            "new conversation, a fork with everything shown here.",
            "Continue as a fork",
            "Reload",
        )
        self._app.push_screen(question, self._settle_conflict)

    async def _settle_conflict(self, fork: bool | None) -> None:
        session = self._session
        if fork:
            session.fork()
            self._app.notify(f"Saved as a new conversation: {self._conversation.title}", timeout=8)
            return
        conv_id = self._conversation.id
        unsaved = [m for m in self._conversation.messages if m.id is None and m.role == "user"]
        turn = self.turn
        if turn.generating:
            turn.stop()
            await turn.stopped()
        await self._screen.reply_drawn()
        if conv_id is None:
            return
        if await self.open(conv_id) and unsaved:
            self._screen.put_in_empty_box(unsaved[-1].content)
