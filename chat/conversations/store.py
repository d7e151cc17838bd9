"""SQLite persistence for conversations: the store's queries, saving as it happens.

Every write commits at once (WAL mode, short transactions), so killing kvchat
loses at most the write in flight. Two kvchat processes may share the file:
SQLite's locking serialises them and `busy_timeout` makes the loser wait
instead of failing. No Textual and no llama_cpp here.

Beside it: the schema and its migrations (`schema`), the file itself
(`database_file`: created, checked, moved aside), rows to values
(`message_rows`) and the search (`search`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chat import paths
from chat.conversations import database_file, search
from chat.conversations.conversation import (
    LOCAL_BACKEND,
    Conversation,
    Message,
    ReplyStats,
    TokenChoice,
)
from chat.conversations.database_file import CorruptDatabaseError, move_aside
from chat.conversations.message_rows import (
    STATS_COLUMNS,
    backend_value,
    message_tree,
    model_path_value,
    sampling_from_json,
    sampling_json,
    server_url_value,
    stats_values,
    stored_text,
    stored_time,
    token_ids_blob,
    token_probs_value,
)
from chat.conversations.schema import MIGRATIONS, SCHEMA_VERSION, NewerSchemaError, upgrade
from chat.conversations.tool_steps import ToolStep, search_text, steps_json
from chat.conversations.tool_switches import ToolSwitches, switches_from_json, switches_json
from chat.errors import StoreError
from chat.json_numbers import SQLITE_INTEGERS

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ConversationChangedError",
    "ConversationNotFoundError",
    "ConversationSummary",
    "CorruptDatabaseError",
    "NewerSchemaError",
    "Store",
    "StoreError",
    "move_aside",
]


_INSERTED_COLUMNS = (
    "role",
    "content",
    "thinking",
    "thought_open",
    "created",
    "token_count",
    *STATS_COLUMNS,
    "token_probs",
    "writer_pid",
    "interrupted",
    "token_ids",
    "tool_steps",
    "tool_text",
)
# At the next position, after its parent (one deeper).
_INSERT_MESSAGE = (
    "INSERT INTO messages (conversation_id, position, parent_id, depth, "
    f"{', '.join(_INSERTED_COLUMNS)}) VALUES (?, "
    "(SELECT COALESCE(MAX(position), -1) + 1 FROM messages WHERE conversation_id = ?), ?, "
    "COALESCE((SELECT depth + 1 FROM messages WHERE id = ?), 0), "
    f"{', '.join('?' * len(_INSERTED_COLUMNS))})"
)


class ConversationChangedError(StoreError):
    """Another kvchat window added to the conversation since this one last saw it."""


class ConversationNotFoundError(StoreError):
    """A conversation or message is gone, e.g. deleted from another kvchat window."""


@dataclass
class ConversationSummary:
    """One row of the saved-conversations list."""

    id: int
    title: str
    model_name: str
    message_count: int
    """Messages on the branch shown (other branches are not counted)."""
    updated: float
    created: float
    backend: str = LOCAL_BACKEND
    """"local" or the kind of server the conversation was made with."""
    server_url: str = ""
    """The server's URL (no user name or password), "" for a local model."""


def _summary(
    conv_id: int,
    title: object,
    model_name: object,
    message_count: int,
    updated: object,
    created: object,
    backend: str,
    server_url: str,
) -> ConversationSummary:
    """A row of the list, its texts and times as `message_rows` reads them."""
    return ConversationSummary(
        conv_id,
        stored_text(title),
        stored_text(model_name),
        message_count,
        stored_time(updated),
        stored_time(created),
        backend,
        server_url,
    )


class Store:
    """The conversation database. Thread-safe: one connection behind a lock."""

    def __init__(self, path: Path | str | None = None, *, quick_check: bool = True) -> None:
        self.path = Path(path) if path is not None else paths.database_file()
        database_file.create_file(self.path)
        database_file.check_existing(self.path, quick_check)
        self._lock = threading.RLock()
        # isolation_level=None: autocommit; multi-statement writes use explicit
        # BEGIN IMMEDIATE ... COMMIT (see `_write`).
        timeout_s = database_file.BUSY_TIMEOUT_S
        self._conn = sqlite3.connect(
            self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            with self._translate_errors():
                self.wait_when_locked(timeout_s)
                self._conn.execute("PRAGMA journal_mode = WAL")
                # In WAL mode NORMAL survives a killed process (only a power cut can
                # lose the last commits) and spares an fsync on every streamed update.
                self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute("PRAGMA foreign_keys = ON")
                self._migrate()
                self.has_fts = self._sync_search_index()
        except BaseException:
            self._conn.close()
            raise

    # -- plumbing

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def trace(self, callback: Callable[[str], object] | None) -> None:
        """Call `callback` with each SQL statement the store runs from now on
        (None: stop), as SQLite expands it; a trigger's own statements start
        with "--". For finding out what a change writes, and how often."""
        with self._lock:
            self._conn.set_trace_callback(callback)

    def wait_when_locked(self, seconds: float) -> None:
        """How long a statement waits for another program's lock on the file
        before it fails (`database_file.BUSY_TIMEOUT_S` at first)."""
        with self._lock, self._translate_errors():
            self._conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except OverflowError as error:
            # An id past SQLite's integers (`--export 99999999999999999999`, a
            # file name) names no row: it is not found, as any other missing id.
            raise ConversationNotFoundError(
                f"There is no conversation or message with that id in {self.path}."
            ) from error
        except sqlite3.DatabaseError as error:
            translated = database_file.translate(self.path, error)
            if translated is error:
                raise
            raise translated from error

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short transaction. IMMEDIATE takes the write lock up front, so a
        second process waits (busy_timeout) instead of failing half-way."""
        with self._lock, self._translate_errors():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                # Inside the try: a COMMIT that fails (a full disk) is rolled back
                # too, or the next BEGIN would fail inside the broken transaction.
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: several SELECTs see one consistent snapshot."""
        with self._lock, self._translate_errors():
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        with self._write() as conn:
            # Read again under the write lock (in `upgrade`): another process
            # may have migrated.
            upgrade(conn, self.path)

    def _sync_search_index(self) -> bool:
        """Match the FTS index to this SQLite: returns whether FTS search is usable.

        A file may be opened by Pythons with and without FTS5. Without it the
        triggers would make every message write fail, so they are dropped; a later
        open with FTS5 sees them missing and rebuilds the index from the messages.
        """
        available = search.fts5_available(self._conn)
        rows = self._conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN ('messages_fts', 'messages_tool_fts') OR "
            "(type = 'trigger' AND name LIKE 'messages\\_fts\\_%' ESCAPE '\\')"
        )
        present = {row[0] for row in rows}
        indexes = (
            ("messages_fts", search.FTS_TRIGGERS, search.install_search_index),
            ("messages_tool_fts", search.TOOL_FTS_TRIGGERS, search.install_tool_search_index),
        )
        triggers = {*search.FTS_TRIGGERS, *search.TOOL_FTS_TRIGGERS}
        if available:
            for table, its_triggers, install in indexes:
                if not present >= {table, *its_triggers}:
                    with self._write() as conn:
                        install(conn)
        elif present & triggers:
            with self._write() as conn:
                for name in triggers:
                    conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        return available

    def _touch(self, conn: sqlite3.Connection, conv_id: int) -> float:
        """Mark the conversation as just updated (returns the time); raise if it is gone."""
        now = time.time()
        cursor = conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conv_id))
        if cursor.rowcount == 0:
            raise self._missing(conv_id)
        return now

    def _missing(self, conv_id: int) -> ConversationNotFoundError:
        return ConversationNotFoundError(
            f"Conversation {conv_id} is no longer in {self.path}; "
            "another kvchat window may have deleted it."
        )

    def _insert_messages(
        self, conn: sqlite3.Connection, conv_id: int, messages: Iterable[Message]
    ) -> None:
        """Write `messages` (a parent before its children; each one's parent saved)."""
        for message in messages:
            parent_id = None
            if message.parent is not None:
                parent_id = message.parent.id
                if parent_id is None:
                    raise ValueError("a message's parent must be saved before it")
            values = (
                message.role,
                message.content,
                message.thinking,
                int(message.thought_open),
                message.created,
                message.token_count,
                *stats_values(message.stats),
                token_probs_value(message.token_probs),
                os.getpid() if message.state == "writing" else None,
                int(message.state == "interrupted"),
                token_ids_blob(message.token_ids),
                steps_json(message.tool_steps),
                search_text(message.tool_steps),
            )
            cursor = conn.execute(
                _INSERT_MESSAGE, (conv_id, conv_id, parent_id, parent_id, *values)
            )
            message.id = cursor.lastrowid
            conn.executemany(
                "INSERT INTO attachments (message_id, position, name, text) VALUES (?, ?, ?, ?)",
                [
                    (message.id, position, attachment.name, attachment.text)
                    for position, attachment in enumerate(message.attachments)
                ],
            )

    def _insert_conversation(
        self, conn: sqlite3.Connection, conv: Conversation, sampling: Mapping[str, Any] | None
    ) -> int:
        conv.link_shown()
        cursor = conn.execute(
            "INSERT INTO conversations (title, created, updated, model_path, model_name, "
            "system_prompt, sampling, backend, server_url, preset, tools_off) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                conv.title,
                conv.created,
                conv.updated,
                model_path_value(conv.model_path),
                conv.model_name,
                conv.system_prompt,
                sampling_json(sampling),
                backend_value(conv.backend),
                server_url_value(conv.server_url),
                conv.preset,
                switches_json(conv.tool_switches),
            ),
        )
        conv_id = cursor.lastrowid
        assert conv_id is not None
        self._insert_messages(conn, conv_id, conv.tree)
        if conv.messages:
            conn.execute(
                "UPDATE conversations SET shown_leaf = ? WHERE id = ?",
                (conv.messages[-1].id, conv_id),
            )
        conv.id = conv_id
        return conv_id

    # -- writing

    def create_conversation(
        self, conv: Conversation, sampling: Mapping[str, Any] | None = None
    ) -> int:
        """Save a new conversation with every message it already has (every branch,
        and which one is shown); sets `conv.id` and the messages' ids."""
        try:
            with self._write() as conn:
                return self._insert_conversation(conn, conv, sampling)
        except BaseException:
            # Not committed (a full disk fails at COMMIT): none of it is saved.
            conv.id = None
            for message in conv.tree:
                message.id = None
            raise

    def import_conversation(self, conv: Conversation, sampling: Mapping[str, Any]) -> int:
        """Save an imported conversation as a new one, all or nothing (one transaction).

        Keeps the imported created/updated times; sets `conv.id` and message ids.
        """
        return self.create_conversation(conv, sampling)

    def add_message(self, conv_id: int, message: Message) -> int:
        """Add a message after `message.parent` (saved already; None: a first
        message); sets `message.id`, bumps the conversation's `updated` and makes
        the message the end of the branch shown."""
        self._append(conv_id, message, seen_updated=None)
        assert message.id is not None
        return message.id

    def append_turn(self, conv: Conversation, message: Message) -> int:
        """`add_message` for a window that holds `conv` open: if another window added
        to it since this one last saved or loaded it (`conv.updated` differs),
        nothing is written and `ConversationChangedError` is raised, so the turns of
        two windows never interleave. `conv.updated` follows each write."""
        assert conv.id is not None
        conv.updated = self._append(conv.id, message, seen_updated=conv.updated)
        assert message.id is not None
        return message.id

    def _append(self, conv_id: int, message: Message, seen_updated: float | None) -> float:
        try:
            with self._write() as conn:
                if seen_updated is not None:
                    row = conn.execute(
                        "SELECT updated FROM conversations WHERE id = ?", (conv_id,)
                    ).fetchone()
                    # As it was read (`stored_time`): a damaged time is 0 both ways.
                    if row is not None and stored_time(row[0]) != seen_updated:
                        raise ConversationChangedError(
                            f"Conversation {conv_id} changed in another kvchat window "
                            "since this one opened it."
                        )
                updated = self._touch(conn, conv_id)
                self._insert_messages(conn, conv_id, [message])
                conn.execute(
                    "UPDATE conversations SET shown_leaf = ? WHERE id = ?", (message.id, conv_id)
                )
        except BaseException:
            message.id = None  # not committed
            raise
        return updated

    def update_message_content(
        self,
        message_id: int,
        content: str,
        token_count: int | None = None,
        stats: ReplyStats | None = None,
        token_probs: Sequence[TokenChoice] | None = None,
        *,
        token_ids: Sequence[int] | None = None,
        thinking: str | None = None,
        thought_open: bool | None = None,
        tool_steps: Sequence[ToolStep] | None = None,
        done: bool = False,
    ) -> None:
        """Save a streaming reply's text so far: one UPDATE, committed at once.

        `token_count`, `stats`, `token_probs`, `token_ids`, `thinking` (a
        reasoning model's thinking so far; `content` is its answer),
        `thought_open` (whether the reply is inside its thinking now) and
        `tool_steps` (a tool turn's steps so far, `Message.tool_steps`;
        `content` is its answer) are left as they are when not given. `done`:
        the reply's final write; from now on it reads as complete.
        """
        assignments = ["content = ?", "token_count = COALESCE(?, token_count)"]
        params: list[Any] = [content, token_count]
        if thinking is not None:
            assignments.append("thinking = ?")
            params.append(thinking)
        if thought_open is not None:
            assignments.append("thought_open = ?")
            params.append(int(thought_open))
        if stats is not None:
            assignments.append(", ".join(f"{column} = ?" for column in STATS_COLUMNS))
            params += stats_values(stats)
        if token_probs is not None:
            assignments.append("token_probs = ?")
            params.append(token_probs_value(token_probs))
        if token_ids is not None:
            assignments.append("token_ids = ?")
            params.append(token_ids_blob(token_ids))
        if tool_steps is not None:
            assignments.append("tool_steps = ?, tool_text = ?")
            params += [steps_json(tool_steps), search_text(tool_steps)]
        if done:
            assignments.append("writer_pid = NULL")
        sql = f"UPDATE messages SET {', '.join(assignments)} WHERE id = ?"
        with self._lock, self._translate_errors():
            # autocommit: its own transaction
            cursor = self._conn.execute(sql, (*params, message_id))
        if cursor.rowcount == 0:
            raise ConversationNotFoundError(
                f"Message {message_id} is no longer in {self.path}; "
                "another kvchat window may have deleted its conversation."
            )

    def delete_message(self, message_id: int) -> None:
        """Delete one message without replies, e.g. a reply that failed before it
        was shown; if it ended the branch shown, its parent does now. Deleting a
        missing one is a no-op."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                return
            conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            conn.execute(
                "UPDATE conversations SET shown_leaf = ? WHERE id = ? AND shown_leaf = ?",
                (row[1], row[0], message_id),
            )

    def set_shown_leaf(self, conv_id: int, message_id: int) -> None:
        """Remember the branch shown (the one ending at `message_id`), for the next
        time the conversation opens. Not a change to the conversation: `updated`
        (the list's order) stays as it is."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE conversations SET shown_leaf = ? WHERE id = ? AND EXISTS "
                "(SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?)",
                (message_id, conv_id, message_id, conv_id),
            )
            if cursor.rowcount == 0:
                raise ConversationNotFoundError(
                    f"Message {message_id} of conversation {conv_id} is no longer in "
                    f"{self.path}; another kvchat window may have deleted it."
                )

    def rename(self, conv_id: int, title: str) -> None:
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (title, conv_id)
            )
            if cursor.rowcount == 0:
                raise self._missing(conv_id)

    def update_conversation_settings(
        self,
        conv_id: int,
        system_prompt: str,
        sampling: Mapping[str, Any],
        model_path: str,
        model_name: str,
        *,
        backend: str | None = None,
        server_url: str | None = None,
        preset: str | None = None,
        tool_switches: ToolSwitches | None = None,
    ) -> None:
        """Record the conversation's own settings and what it is continued with.
        `backend`, `server_url`, `preset` and `tool_switches` (see
        `Conversation`) stay as they are when not given."""
        assignments = "system_prompt = ?, sampling = ?, model_path = ?, model_name = ?"
        params: list[Any] = [
            system_prompt,
            sampling_json(sampling),
            model_path_value(model_path),
            model_name,
        ]
        if backend is not None:
            assignments += ", backend = ?"
            params.append(backend_value(backend))
        if server_url is not None:
            assignments += ", server_url = ?"
            params.append(server_url_value(server_url))
        if preset is not None:
            assignments += ", preset = ?"
            params.append(preset)
        if tool_switches is not None:
            assignments += ", tools_off = ?"
            params.append(switches_json(tool_switches))
        with self._write() as conn:
            cursor = conn.execute(
                f"UPDATE conversations SET {assignments} WHERE id = ?", (*params, conv_id)
            )
            if cursor.rowcount == 0:
                raise self._missing(conv_id)

    def delete_conversation(self, conv_id: int) -> None:
        """Delete a conversation and all its messages. Deleting a missing one is a no-op."""
        with self._write() as conn:
            conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

    # -- reading

    def get_conversation(self, conv_id: int) -> Conversation:
        """The conversation with every message (`tree`) and, as `messages`, the
        branch last shown, down to its newest message (the newest branch when
        none was recorded)."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT title, created, updated, model_path, model_name, system_prompt, "
                "shown_leaf, backend, server_url, preset, tools_off "
                "FROM conversations WHERE id = ?",
                (conv_id,),
            ).fetchone()
            if row is None:
                raise self._missing(conv_id)
            tree, by_id = message_tree(conn, conv_id)
        title, created, updated, model_path, model_name, system_prompt, shown_leaf = row[:7]
        backend, server_url, preset, tools_off = row[7:11]
        shown = by_id.get(shown_leaf) if shown_leaf is not None else None
        leaf = tree.latest_leaf(shown) if shown is not None else tree.newest_leaf()
        return Conversation(
            system_prompt=stored_text(system_prompt),
            messages=[] if leaf is None else tree.path_to(leaf),
            title=stored_text(title),
            id=conv_id,
            created=stored_time(created),
            updated=stored_time(updated),
            model_path=stored_text(model_path),
            model_name=stored_text(model_name),
            tree=tree,
            backend=backend,
            server_url=server_url,
            preset=preset,
            tool_switches=switches_from_json(tools_off),
        )

    def get_sampling(self, conv_id: int) -> dict[str, Any]:
        """The sampling settings saved with the conversation."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT sampling FROM conversations WHERE id = ?", (conv_id,)
            ).fetchone()
        if row is None:
            raise self._missing(conv_id)
        return sampling_from_json(row[0])

    def titles(self, conv_ids: Iterable[int]) -> dict[int, str]:
        """The titles of the conversations of `conv_ids` that exist (an id
        SQLite cannot hold names none)."""
        # An id past SQLite's integers cannot be a row's: SQLite refuses to bind it.
        wanted = sorted(i for i in set(conv_ids) if i in SQLITE_INTEGERS)
        if not wanted:
            return {}
        marks = ", ".join("?" * len(wanted))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT id, title FROM conversations WHERE id IN ({marks})", wanted
            ).fetchall()
        return {int(conv_id): stored_text(title) for conv_id, title in rows}

    def latest_conversation_id(self) -> int | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT id FROM conversations ORDER BY updated DESC, id DESC LIMIT 1"
            ).fetchone()
        return None if row is None else int(row[0])

    def list_conversations(
        self, query: str = "", limit: int = 200, offset: int = 0
    ) -> list[ConversationSummary]:
        """Newest updated first. `query` matches the title (substring) or the text of
        a message on any branch: every word, as a word prefix with FTS5
        (punctuation is ignored), as a substring without."""
        where, params = search.search_clause(query, self.has_fts)
        # The columns in ConversationSummary's field order. The count: the messages
        # on the branch shown, up to its recorded end (else the newest message).
        sql = (
            "SELECT c.id, c.title, c.model_name, "
            "COALESCE((SELECT m.depth + 1 FROM messages m WHERE m.id = COALESCE(c.shown_leaf, "
            " (SELECT n.id FROM messages n WHERE n.conversation_id = c.id "
            "  ORDER BY n.position DESC LIMIT 1))), 0), "
            f"c.updated, c.created, c.backend, c.server_url FROM conversations c {where} "
            "ORDER BY c.updated DESC, c.id DESC LIMIT ? OFFSET ?"
        )
        with self._read() as conn:
            rows = conn.execute(sql, (*params, limit, offset)).fetchall()
        return [_summary(*row) for row in rows]

    def count_conversations(self, query: str = "") -> int:
        """How many conversations `list_conversations(query)` pages through."""
        where, params = search.search_clause(query, self.has_fts)
        with self._read() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM conversations c {where}", params).fetchone()
        return int(row[0])
