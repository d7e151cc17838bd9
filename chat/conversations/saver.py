"""Saving the open conversation as it happens.

The chat screen tells a `ConversationSaver` about each step of a turn: the
user's message (written before generation starts), the reply's row when it
starts, its text while it streams (`save_progress`, called at the cadence the
reply stream sets, so a killed process loses at most one interval of a reply),
and the final text with its stats. A reasoning model's reply is written in its
two parts, the thinking and the answer (`Message.thinking`, `content`), each
time, and a tool turn's reply with its steps so far (`Message.tool_steps`).

A write that fails (a full disk, a read-only folder, another kvchat holding the
database longer than its busy timeout) never stops the chat. It is reported
once, with the reason; `not_saving` then says why in a few words (the screen
keeps it in the status bar) until a write works again. Messages that did not
reach the database stay unsaved (`id` None); `retry` (called on a timer while
`failing`) writes them, in order, as soon as the folder works again, and
nothing already saved is touched. "In order": every unsaved message of the
conversation's tree, every branch, oldest first, so a parent is always written
before its children.

The branch shown is remembered with the conversation: writing a message makes
it the end of the branch shown, and `shown_branch_changed` records a switch to
another branch.

Two windows on one conversation: each turn is written only if no other window
added to the conversation since this one last saved or loaded it
(`Store.append_turn`). Otherwise nothing more is written for it and
`changed_elsewhere` is called; the user reloads it or `fork`s it into a new
conversation. No Textual here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chat.conversations.conversation import Conversation, Message, ReplyState, ReplyStats
from chat.conversations.store import (
    ConversationChangedError,
    ConversationNotFoundError,
    Store,
    StoreError,
)
from chat.conversations.tool_steps import ToolStep
from chat.conversations.tool_switches import ToolSwitches
from chat.errors import ConfigError
from chat.settings.schema import SamplingSettings
from chat.settings.values import parse_value

SAVE_INTERVAL_S = 0.5
"""How often a streaming reply's text is written: a `kill -9` loses at most this much."""

_Parts = tuple[str, str, tuple[ToolStep, ...], bool]
"""A streaming reply's row so far: its answer, thinking, tool steps, and
whether it is inside its thinking (`Message.thought_open`)."""


@dataclass(frozen=True)
class ConversationSettings:
    """What a conversation's row keeps besides its messages."""

    system_prompt: str
    sampling: dict[str, Any]
    model_path: str
    model_name: str
    backend: str = "local"
    """"local", or the kind of model server (`Conversation.backend`)."""
    server_url: str = ""
    preset: str = ""
    """The preset's name (`Conversation.preset`)."""
    tool_switches: ToolSwitches = field(default_factory=ToolSwitches)
    """The tools turned off (`Conversation.tool_switches`)."""


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
        # The reply being streamed and its text last written.
        self._conversation: Conversation | None = None
        self._settings: ConversationSettings | None = None
        self._reply: Message | None = None
        # (answer, thinking, tool steps, inside the thinking)
        self._saved_text: _Parts = ("", "", (), False)
        # A finished reply whose final text could not be written to its row.
        self._final_unsaved: _FinalReply | None = None
        # A switch of the branch shown not recorded yet (the conversation's id and
        # the last message shown), written with the next write that works.
        self._shown_unsaved: tuple[Conversation, Message] | None = None
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
        for message in conversation.tree:
            message.id = None
        if self._reply is not None:
            self._reply.id = None
        self._conflict = None
        self._saved_text = ("", "", (), False)
        self.save_messages(conversation, settings)

    # -- one turn

    def save_messages(self, conversation: Conversation, settings: ConversationSettings) -> bool:
        """Write every message not yet saved (normally just the user's new one),
        oldest first, on every branch, creating the conversation's row on its
        first message, and the settings when they changed. Called before
        generation starts. False: it failed (and was reported)."""
        if self.store is None or self._blocked(conversation):
            return False
        try:
            self._write_messages(self.store, conversation, settings)
        except StoreError as error:
            self._failed(conversation, settings, error)
            return False
        self._worked()
        return True

    def _write_messages(
        self, store: Store, conversation: Conversation, settings: ConversationSettings
    ) -> None:
        """`save_messages` without its bookkeeping: raises StoreError."""
        conversation.link_shown()
        if self._undeleted:
            self._delete_taken_back(store, conversation)
        final = self._final_unsaved
        if final is not None:
            if final.reply.id is not None:
                _update_reply(store, final, done=True)
            self._final_unsaved = None
        if conversation.id is None:
            conversation.title = conversation.title or conversation.default_title()
            conversation.model_path = settings.model_path
            conversation.model_name = settings.model_name
            conversation.backend = settings.backend
            conversation.server_url = settings.server_url
            conversation.preset = settings.preset
            conversation.tool_switches = settings.tool_switches
            store.create_conversation(conversation, settings.sampling)
        else:
            if self._saved_settings != (conversation.id, settings):
                store.update_conversation_settings(
                    conversation.id,
                    settings.system_prompt,
                    settings.sampling,
                    settings.model_path,
                    settings.model_name,
                    backend=settings.backend,
                    server_url=settings.server_url,
                    preset=settings.preset,
                    tool_switches=settings.tool_switches,
                )
            written = False
            for message in conversation.tree:
                # Oldest first: a parent is written before its children. One
                # whose parent is not saved (outside the tree) waits for it.
                parent = message.parent
                if message.id is None and (parent is None or parent.id is not None):
                    store.append_turn(conversation, message)
                    written = True
            if written and conversation.messages:
                # Each write made its message the end of the branch shown.
                self._shown_unsaved = (conversation, conversation.messages[-1])
        assert conversation.id is not None
        self._saved_settings = (conversation.id, settings)
        self._write_shown(store, conversation)

    def shown_branch_changed(self, conversation: Conversation) -> None:
        """The conversation shows another branch now: remember it (the end of
        `conversation.messages`) for the next time it opens. A failed write is
        tried again with the next write, like every other."""
        if not conversation.messages:
            return
        self._shown_unsaved = (conversation, conversation.messages[-1])
        if self.store is None or conversation.id is None or self._blocked(conversation):
            return  # recorded when the conversation is saved
        if self.failing:
            return  # written by `retry` with the rest
        try:
            self._write_shown(self.store, conversation)
        except StoreError as error:
            self._failed(conversation, None, error)

    def _write_shown(self, store: Store, conversation: Conversation) -> None:
        """Record the branch shown, if a switch to it waits to be recorded."""
        if self._shown_unsaved is None:
            return
        shown_in, leaf = self._shown_unsaved
        if shown_in is not conversation:
            self._shown_unsaved = None  # another conversation is open now
            return
        if conversation.id is None or leaf.id is None:
            return  # its messages are not all saved yet: written after them
        store.set_shown_leaf(conversation.id, leaf.id)
        self._shown_unsaved = None

    def start_reply(
        self, conversation: Conversation, settings: ConversationSettings, reply: Message
    ) -> None:
        """A reply starts streaming; its row is written now (empty) and then as it
        grows. `reply.parent`: the message it answers (set by the caller); the
        reply joins the conversation's tree when it is complete."""
        self._conversation = conversation
        self._settings = settings
        self._reply = reply
        # A reply continued is written once it has grown (its row holds it).
        self._saved_text = ("", reply.thinking, reply.tool_steps, reply.thought_open)
        self.save_progress("")

    def save_progress(
        self,
        text: str,
        thinking: str | None = None,
        *,
        tool_steps: Sequence[ToolStep] | None = None,
        thought_open: bool | None = None,
    ) -> None:
        """Write `text`, the reply so far (a reasoning model's answer so far),
        `thinking`, its thinking so far, `tool_steps`, a tool turn's steps
        so far, and `thought_open`, whether it is inside its thinking now, if
        they changed since the last write. Any of them None: the reply's own
        (`Message.thinking`, `Message.tool_steps`, `Message.thought_open`,
        none for a new reply), as for a model that does not think or a turn
        without tools. While writes fail, this waits for `retry`."""
        reply = self._reply
        if reply is None or self.failing:
            return
        parts = self._parts(reply, text, thinking, tool_steps, thought_open)
        if reply.id is not None and parts == self._saved_text:
            return
        self._write_reply(parts, None)

    @staticmethod
    def _parts(
        reply: Message,
        text: str,
        thinking: str | None,
        tool_steps: Sequence[ToolStep] | None,
        thought_open: bool | None = None,
    ) -> _Parts:
        """(answer, thinking, tool steps, inside the thinking): the reply's own where None."""
        return (
            text,
            reply.thinking if thinking is None else thinking,
            reply.tool_steps if tool_steps is None else tuple(tool_steps),
            reply.thought_open if thought_open is None else thought_open,
        )

    def finish_reply(
        self,
        text: str,
        stats: ReplyStats | None,
        token_ids: list[int] | None = None,
        *,
        thinking: str | None = None,
        tool_steps: Sequence[ToolStep] | None = None,
        thought_open: bool | None = None,
    ) -> None:
        """The final text (the engine's, authoritative; a reasoning model's
        answer, with its `thinking` apart: None keeps the reply's own
        `Message.thinking`; a tool turn's answer, with its `tool_steps`
        before it: None keeps the reply's own `Message.tool_steps`), whether
        it ended inside its thinking (None: `Message.thought_open`), how it
        was generated and the token ids sampled. If it cannot be written, the
        reply (in the conversation by now) is written whole by `retry` or with
        the next message."""
        reply = self._reply
        if reply is not None:
            parts = self._parts(reply, text, thinking, tool_steps, thought_open)
            final = _FinalReply(reply, *parts, stats, token_ids)
            written = self._write_reply(
                parts,
                stats,
                token_ids=token_ids,
                done=True,
            )
            if not written and reply.id is not None:
                # Its row holds older text: written again by `retry` or with the next message.
                self._final_unsaved = final
        self._reply = None
        self._conversation = None

    def retry(
        self,
        conversation: Conversation,
        settings: ConversationSettings,
        reply_text: str | None = None,
        reply_thinking: str | None = None,
        reply_tool_steps: Sequence[ToolStep] | None = None,
    ) -> None:
        """Try the failed writes again (called on a timer while `failing`).
        `conversation`: the one on screen; `reply_text`: the streaming reply's
        text so far, if one streams, `reply_thinking` its thinking so far and
        `reply_tool_steps` its tool steps so far (None: the reply's own, as in
        `save_progress`)."""
        if not self.failing or self.store is None:
            return
        reply = self._reply
        if reply is not None and reply_text is not None:
            parts = self._parts(reply, reply_text, reply_thinking, reply_tool_steps)
            self._write_reply(parts, None)
        else:
            # The conversation whose save failed first (the user may have opened another).
            self.save_messages(*(self._unsaved or (conversation, settings)))

    def _write_reply(
        self,
        parts: _Parts,
        stats: ReplyStats | None,
        *,
        token_ids: list[int] | None = None,
        done: bool = False,
    ) -> bool:
        """`done`: the final write. Until then the row says the reply is being
        written, so that a kvchat killed mid-reply leaves it marked interrupted."""
        reply, conversation, settings = self._reply, self._conversation, self._settings
        text, thinking, tool_steps, thought_open = parts
        assert reply is not None and conversation is not None and settings is not None
        if self.store is None or self._blocked(conversation):
            return False
        try:
            if reply.id is None:
                # The messages before it first (normally all saved already). At
                # the end the reply is in the conversation: then it is one of them.
                self._write_messages(self.store, conversation, settings)
            if reply.id is None:
                assert conversation.id is not None
                # A copy with the text so far: the screen's message fills in at the end.
                state: ReplyState = "complete" if done else "writing"
                row = dataclasses.replace(
                    reply,
                    content=text,
                    thinking=thinking,
                    thought_open=thought_open,
                    tool_steps=tool_steps,
                    stats=stats,
                    state=state,
                    token_ids=token_ids,
                )
                if reply.parent is not None and reply.parent.id is None:
                    return False  # the message it answers could not be saved: waits for it
                reply.id = self.store.append_turn(conversation, row)
                # The reply ends the branch shown now, as the write recorded.
                self._shown_unsaved = None
            else:
                written = _FinalReply(reply, *parts, stats, token_ids)
                _update_reply(self.store, written, done=done)
        except StoreError as error:
            self._failed(conversation, settings, error)
            return False
        self._saved_text = parts
        self._worked()
        return True

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
        if not len(conversation.tree) and conversation.id is not None:
            store.delete_conversation(conversation.id)
            conversation.id = None
            conversation.title = ""

    def unsaved_messages(self, conversation: Conversation) -> int:
        """How many of `conversation`'s messages are not wholly in the database:
        never written, or a reply whose final text was not (a full disk). Quitting
        asks what to do with them."""
        count = sum(1 for message in conversation.tree if message.id is None)
        final = self._final_unsaved
        if final is not None and final.reply.id is not None:
            count += 1
        return count

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
            for message in conversation.tree:
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


@dataclass(frozen=True)
class _FinalReply:
    """A reply's write: what `_update_reply` writes; the final one is kept to
    write again when it failed."""

    reply: Message
    text: str
    thinking: str
    tool_steps: tuple[ToolStep, ...]
    thought_open: bool
    stats: ReplyStats | None
    token_ids: list[int] | None


def _update_reply(store: Store, write: _FinalReply, *, done: bool) -> None:
    """Write a saved reply's text (its thinking and tool steps) so far; the
    final write (`done`) carries the recorded token probabilities and the
    sampled tokens too."""
    reply = write.reply
    assert reply.id is not None
    store.update_message_content(
        reply.id,
        write.text,
        stats=write.stats,
        token_probs=reply.token_probs,
        token_ids=write.token_ids,
        thinking=write.thinking,
        thought_open=write.thought_open,
        # Left as it is when there are none: no search index to update.
        tool_steps=write.tool_steps or None,
        done=done,
    )
