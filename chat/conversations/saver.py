"""Saving the open conversation as it happens.

The chat screen tells a `ConversationSaver` about each step of a turn: the
user's message (written before generation starts), the reply's row when it
starts, its text while it streams (`save_progress`, called at the cadence the
reply stream sets, so a killed process loses at most one interval of a reply),
and the final text with its stats.

A write that fails (another kvchat holding the database longer than its busy
timeout, a full disk, the conversation deleted from another window) is reported
through `report` and never stops the chat: messages that did not reach the
database stay unsaved (`id` None) and are written, in order, with the next
message. No Textual here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import ConversationNotFoundError, Store, StoreError
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

    def __init__(self, report: Callable[[str], None]) -> None:
        self.store: Store | None = None
        self.not_saving: str | None = None
        """Why conversations are not being saved (shown on screen), or None."""
        self._report = report
        self._saved_settings: tuple[int, ConversationSettings] | None = None
        # The reply being streamed, what it replaces, and its text last written.
        self._conversation: Conversation | None = None
        self._settings: ConversationSettings | None = None
        self._reply: Message | None = None
        self._replaces: int | None = None
        self._saved_text = ""
        self._progress_failed = False

    def attach(self, store: Store) -> None:
        self.store = store
        self.not_saving = None

    def stop_saving(self, reason: str) -> None:
        """Go on without a database (the user chose to); `reason` stays on screen."""
        self.store = None
        self.not_saving = reason

    def opened(self, conversation: Conversation, settings: ConversationSettings) -> None:
        """A conversation was loaded from the store: its row already holds `settings`."""
        if conversation.id is not None:
            self._saved_settings = (conversation.id, settings)

    # -- one turn

    def save_messages(self, conversation: Conversation, settings: ConversationSettings) -> bool:
        """Write every message not yet saved (normally just the user's new one),
        creating the conversation's row on its first message, and the settings
        when they changed. Called before generation starts. False: it failed
        (and was reported)."""
        if self.store is None:
            return False
        store = self.store
        try:
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
                        store.add_message(conversation.id, message)
            assert conversation.id is not None
            self._saved_settings = (conversation.id, settings)
        except StoreError as error:
            self._failed(conversation, error)
            return False
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
        self._replaces = replaces
        self._saved_text = ""
        self._progress_failed = False
        self.save_progress("")

    def save_progress(self, text: str) -> None:
        """Write `text`, the reply so far, if it changed since the last write."""
        if self._reply is None or self._progress_failed:
            return
        if self._reply.id is not None and text == self._saved_text:
            return
        self._progress_failed = not self._write_reply(text, None)

    def finish_reply(self, text: str, stats: ReplyStats | None) -> None:
        """The final text (the engine's, authoritative) and how it was generated."""
        if self._reply is not None:
            self._write_reply(text, stats)
        self._reply = None
        self._conversation = None

    def _write_reply(self, text: str, stats: ReplyStats | None) -> bool:
        reply, conversation, settings = self._reply, self._conversation, self._settings
        assert reply is not None and conversation is not None and settings is not None
        if self.store is None:
            return True
        try:
            if reply.id is None:
                # The messages before it first (normally all saved already).
                if not self.save_messages(conversation, settings):
                    return False
                assert conversation.id is not None
                # A copy with the text so far: the screen's message fills in at the end.
                row = dataclasses.replace(reply, content=text, stats=stats)
                reply.id = self.store.add_message(conversation.id, row, replaces=self._replaces)
                self._replaces = None
            else:
                # The final write carries the recorded token probabilities too.
                self.store.update_message_content(
                    reply.id, text, stats=stats, token_probs=reply.token_probs
                )
        except StoreError as error:
            self._failed(conversation, error)
            return False
        self._saved_text = text
        return True

    def discard(self, conversation: Conversation, message: Message) -> None:
        """Delete a message the screen took back (a failed reply, a message that did
        not fit); a conversation left without messages goes too."""
        if message is self._reply:
            self._reply = None
            self._conversation = None
        if self.store is None or message.id is None:
            return
        try:
            self.store.delete_message(message.id)
            message.id = None
            if not conversation.messages and conversation.id is not None:
                self.store.delete_conversation(conversation.id)
                conversation.id = None
                conversation.title = ""
        except StoreError as error:
            self._failed(conversation, error)

    def _failed(self, conversation: Conversation, error: StoreError) -> None:
        if isinstance(error, ConversationNotFoundError):
            # Deleted from another kvchat window: the next write saves it again, whole.
            conversation.id = None
            for message in conversation.messages:
                message.id = None
            if self._reply is not None:
                self._reply.id = None
            self._report(f"{error} kvchat will save this conversation again as a new one.")
            return
        self._report(f"Not saved: {error}")
