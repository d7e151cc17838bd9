"""Saving the open conversation as it happens.

The chat screen tells a `ConversationSaver` about each step of a turn: the
user's message (written before generation starts), the reply's row when it
starts, its text while it streams (`save_progress`, called at the cadence the
reply stream sets, so a killed process loses at most one interval of a reply),
and the final text with its stats.

A write that fails (a full disk, a read-only folder, another kvchat holding the
database longer than its busy timeout) never stops the chat. It is reported
once, with the reason; `not_saving` then says why in a few words (the screen
keeps it in the status bar) until a write works again. Messages that did not
reach the database stay unsaved (`id` None); `retry` (called on a timer while
`failing`) writes them, in order, as soon as the folder works again, and
nothing already saved is touched.

Two windows on one conversation: each turn is written only if no other window
added to the conversation since this one last saved or loaded it
(`Store.append_turn`). Otherwise nothing more is written for it and
`changed_elsewhere` is called; the user reloads it or `fork`s it into a new
conversation. No Textual here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chat.conversations.conversation import Conversation, Message, ReplyState, ReplyStats
from chat.conversations.store import (
    ConversationChangedError,
    ConversationNotFoundError,
    Store,
    StoreError,
)
from chat.errors import ConfigError
from chat.settings.schema import SamplingSettings
from chat.settings.values import parse_value

SAVE_INTERVAL_S = 0.5
"""How often a streaming reply's text is written: a `kill -9` loses at most this much."""


@dataclass(frozen=True)
class ConversationSettings:
    """What a conversation's row keeps besides its messages."""

    system_prompt: str
    sampling: dict[str, Any]
    model_path: str
    model_name: str


def restore_sampling(saved: Mapping[str, Any], base: SamplingSettings) -> SamplingSettings:
    """`base` with the values saved with a conversation put back.

    Saved values are checked like config values; keys this version does not know
    and values out of range are skipped (a conversation saved by another kvchat
    version must still open), so the result is always valid.
    """
    names = {item.name for item in dataclasses.fields(SamplingSettings)}
    values: dict[str, Any] = {}
    for name, raw in saved.items():
        if name not in names:
            continue
        try:
            values[name] = parse_value(f"sampling.{name}", raw)
        except ConfigError:
            continue
    return dataclasses.replace(base, **values)


class ConversationSaver:
    """Writes one chat screen's conversation to the store, step by step."""

    def __init__(
        self,
        report: Callable[[str], None],
        not_saving_changed: Callable[[str | None], None] = lambda reason: None,
        changed_elsewhere: Callable[[], None] = lambda: None,
    ) -> None:
        """`report`: a problem to tell the user once; `not_saving_changed`: the
        lasting reason (None: saving works again); `changed_elsewhere`: another
        window added to the conversation (see the module docstring)."""
        self.store: Store | None = None
        self.not_saving: str | None = None
        """Why conversations are not being saved (shown on screen), or None."""
        self.failing = False
        """Writes are failing (not: the user chose to go on without a database)."""
        self._report = report
        self._not_saving_changed = not_saving_changed
        self._changed_elsewhere = changed_elsewhere
        self._saved_settings: tuple[int, ConversationSettings] | None = None
        # The conversation whose last save failed, to write on `retry`.
        self._unsaved: tuple[Conversation, ConversationSettings] | None = None
        # The id of a conversation another window added to: not written to again.
        self._conflict: int | None = None
        # The reply being streamed and its text last written; the reply that a
        # regenerated one supersedes, until the new one is written.
        self._conversation: Conversation | None = None
        self._settings: ConversationSettings | None = None
        self._reply: Message | None = None
        self._replaces: tuple[Message, int] | None = None
        self._saved_text = ""
        # A finished reply whose final text could not be written to its row.
        self._final_unsaved: tuple[Message, str, ReplyStats | None] | None = None
        # Rows of messages the screen took back, not deleted yet (a full disk).
        self._undeleted: list[int] = []

    def attach(self, store: Store) -> None:
        self.store = store
        self._set_not_saving(None)
        self.failing = False

    def stop_saving(self, reason: str) -> None:
        """Go on without a database (the user chose to); `reason` stays on screen."""
        self.store = None
        self.failing = False
        self._set_not_saving(reason)

    def opened(self, conversation: Conversation, settings: ConversationSettings) -> None:
        """A conversation was loaded from the store: its row already holds `settings`."""
        if conversation.id is not None:
            self._saved_settings = (conversation.id, settings)
        self._conflict = None

    @property
    def has_conflict(self) -> bool:
        return self._conflict is not None

    def fork(self, conversation: Conversation, settings: ConversationSettings) -> None:
        """Another window changed `conversation`: save it, as this window has it,
        as a new conversation (a reply streaming now follows it there)."""
        conversation.id = None
        conversation.title = f"{conversation.title or conversation.default_title()} (fork)"
        for message in conversation.messages:
            message.id = None
        if self._reply is not None:
            self._reply.id = None
        self._replaces = None
        self._conflict = None
        self._saved_text = ""
        self.save_messages(conversation, settings)

    # -- one turn

    def save_messages(self, conversation: Conversation, settings: ConversationSettings) -> bool:
        """Write every message not yet saved (normally just the user's new one),
        creating the conversation's row on its first message, and the settings
        when they changed. Called before generation starts. False: it failed
        (and was reported)."""
        if self.store is None or self._blocked(conversation):
            return False
        store = self.store
        try:
            if self._undeleted:
                self._delete_taken_back(store, conversation)
            if self._final_unsaved is not None:
                reply, text, stats = self._final_unsaved
                if reply.id is not None:
                    store.update_message_content(
                        reply.id, text, stats=stats, token_probs=reply.token_probs, done=True
                    )
                self._final_unsaved = None
            if conversation.id is None:
                conversation.title = conversation.title or conversation.default_title()
                conversation.model_path = settings.model_path
                conversation.model_name = settings.model_name
                store.create_conversation(conversation, settings.sampling)
            else:
                if self._saved_settings != (conversation.id, settings):
                    store.update_conversation_settings(
                        conversation.id,
                        settings.system_prompt,
                        settings.sampling,
                        settings.model_path,
                        settings.model_name,
                    )
                for message in conversation.messages:
                    if message.id is None:
                        store.append_turn(
                            conversation, message, replaces=self._replaced_by(message)
                        )
            assert conversation.id is not None
            self._saved_settings = (conversation.id, settings)
        except StoreError as error:
            self._failed(conversation, settings, error)
            return False
        self._worked()
        return True

    def start_reply(
        self,
        conversation: Conversation,
        settings: ConversationSettings,
        reply: Message,
        replaces: int | None = None,
    ) -> None:
        """A reply starts streaming; its row is written now (empty) and then as it grows.
        `replaces`: the id of the reply it regenerates, kept but hidden."""
        self._conversation = conversation
        self._settings = settings
        self._reply = reply
        self._replaces = (reply, replaces) if replaces is not None else None
        self._saved_text = ""
        self.save_progress("")

    def save_progress(self, text: str) -> None:
        """Write `text`, the reply so far, if it changed since the last write.
        While writes fail, this waits for `retry`."""
        if self._reply is None or self.failing:
            return
        if self._reply.id is not None and text == self._saved_text:
            return
        self._write_reply(text, None)

    def finish_reply(self, text: str, stats: ReplyStats | None) -> None:
        """The final text (the engine's, authoritative) and how it was generated.
        If it cannot be written, the reply (in the conversation by now) is written
        whole by `retry` or with the next message."""
        reply = self._reply
        if (
            reply is not None
            and not self._write_reply(text, stats, done=True)
            and reply.id is not None
        ):
            # Its row holds older text: written again by `retry` or with the next message.
            self._final_unsaved = (reply, text, stats)
        self._reply = None
        self._conversation = None

    def retry(
        self,
        conversation: Conversation,
        settings: ConversationSettings,
        reply_text: str | None = None,
    ) -> None:
        """Try the failed writes again (called on a timer while `failing`).
        `conversation`: the one on screen; `reply_text`: the streaming reply's
        text so far, if one streams."""
        if not self.failing or self.store is None:
            return
        if self._reply is not None and reply_text is not None:
            self._write_reply(reply_text, None)
        else:
            # The conversation whose save failed first (the user may have opened another).
            self.save_messages(*(self._unsaved or (conversation, settings)))

    def _write_reply(self, text: str, stats: ReplyStats | None, *, done: bool = False) -> bool:
        """`done`: the final write. Until then the row says the reply is being
        written, so that a kvchat killed mid-reply leaves it marked interrupted."""
        reply, conversation, settings = self._reply, self._conversation, self._settings
        assert reply is not None and conversation is not None and settings is not None
        if self.store is None or self._blocked(conversation):
            return False
        try:
            if reply.id is None:
                # The messages before it first (normally all saved already).
                if not self.save_messages(conversation, settings):
                    return False
                assert conversation.id is not None
                # A copy with the text so far: the screen's message fills in at the end.
                state: ReplyState = "complete" if done else "writing"
                row = dataclasses.replace(reply, content=text, stats=stats, state=state)
                reply.id = self.store.append_turn(
                    conversation, row, replaces=self._replaced_by(reply)
                )
            else:
                # The final write carries the recorded token probabilities too.
                self.store.update_message_content(
                    reply.id, text, stats=stats, token_probs=reply.token_probs, done=done
                )
        except StoreError as error:
            self._failed(conversation, settings, error)
            return False
        self._saved_text = text
        self._worked()
        return True

    def _replaced_by(self, message: Message) -> int | None:
        """The id of the reply `message` regenerates, if it does (used once)."""
        if self._replaces is None or self._replaces[0] is not message:
            return None
        replaces = self._replaces[1]
        self._replaces = None
        return replaces

    def discard(self, conversation: Conversation, message: Message) -> None:
        """Delete a message the screen took back (a failed reply, a message that did
        not fit); a conversation left without messages goes too."""
        if message is self._reply:
            self._reply = None
            self._conversation = None
        if self.store is None or message.id is None:
            return
        self._undeleted.append(message.id)
        message.id = None
        try:
            self._delete_taken_back(self.store, conversation)
        except StoreError as error:
            self._failed(conversation, None, error)

    def _delete_taken_back(self, store: Store, conversation: Conversation) -> None:
        """Delete the rows of messages taken back (kept until it works)."""
        while self._undeleted:
            store.delete_message(self._undeleted[0])
            self._undeleted.pop(0)
        if not conversation.messages and conversation.id is not None:
            store.delete_conversation(conversation.id)
            conversation.id = None
            conversation.title = ""

    # -- how writes went

    def _blocked(self, conversation: Conversation) -> bool:
        return conversation.id is not None and conversation.id == self._conflict

    def _worked(self) -> None:
        self._unsaved = None
        if self.failing:
            self.failing = False
            self._set_not_saving(None)
            self._report("Saving again: the conversation so far is saved.")

    def _failed(
        self,
        conversation: Conversation,
        settings: ConversationSettings | None,
        error: StoreError,
    ) -> None:
        if settings is not None:
            self._unsaved = (conversation, settings)
        if isinstance(error, ConversationNotFoundError):
            # Deleted from another kvchat window: the next write saves it again, whole.
            conversation.id = None
            for message in conversation.messages:
                message.id = None
            if self._reply is not None:
                self._reply.id = None
            self._report(f"{error} kvchat will save this conversation again as a new one.")
            return
        if isinstance(error, ConversationChangedError):
            if self._conflict is None:
                self._conflict = conversation.id
                self._changed_elsewhere()
            return
        if not self.failing:
            # Said once; the status bar keeps `brief` until a write works again.
            self.failing = True
            self._set_not_saving(error.brief)
            self._report(
                f"{error}\nChatting goes on: kvchat keeps this conversation and saves it "
                "as soon as it can write again."
            )

    def _set_not_saving(self, reason: str | None) -> None:
        if reason != self.not_saving:
            self.not_saving = reason
            self._not_saving_changed(reason)
