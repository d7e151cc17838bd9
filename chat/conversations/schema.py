"""The conversation database's schema, as the migrations that build it.

A database records its version in `PRAGMA user_version`: the number of
migrations run on it. Each migration is written once and never changed; a new
column or table is a new migration at the end of `MIGRATIONS`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from chat.conversations import search
from chat.errors import StoreError


class NewerSchemaError(StoreError):
    """The database was written by a newer kvchat than this one."""

    def __init__(self, path: Path, found: int, known: int) -> None:
        self.path = path
        super().__init__(
            f"The conversation database {path} was written by a newer version of kvchat "
            f"(schema version {found}; this version knows up to {known}). "
            "kvchat has not changed it. Upgrade kvchat to open it, or set KVCHAT_DATA_DIR "
            "to another folder to use a separate database."
        )


_SCHEMA_1 = (
    """
    CREATE TABLE conversations (
        id            INTEGER PRIMARY KEY,
        title         TEXT NOT NULL DEFAULT '',
        created       REAL NOT NULL,
        updated       REAL NOT NULL,
        model_path    TEXT NOT NULL DEFAULT '',
        model_name    TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT '',
        sampling      TEXT NOT NULL DEFAULT '{}'
    )
    """,
    # The conversation list pages through this, newest first.
    "CREATE INDEX conversations_by_updated ON conversations (updated DESC, id DESC)",
    # `superseded` hides a regenerated reply from the visible history but keeps it;
    # `replaced_by` points at the reply that took its place. It is deliberately not a
    # foreign key: deleting messages would then scan the table for referrers.
    # `token_probs`: the reply's per-token probabilities (chat/token_probs_codec.py).
    """
    CREATE TABLE messages (
        id               INTEGER PRIMARY KEY,
        conversation_id  INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        position         INTEGER NOT NULL,
        role             TEXT NOT NULL,
        content          TEXT NOT NULL,
        created          REAL NOT NULL,
        token_count      INTEGER,
        superseded       INTEGER NOT NULL DEFAULT 0,
        replaced_by      INTEGER,
        prompt_tokens    INTEGER,
        prompt_evaluated INTEGER,
        generated_tokens INTEGER,
        ttft_s           REAL,
        decode_tps       REAL,
        finish_reason    TEXT,
        seed             INTEGER,
        total_s          REAL,
        token_probs      BLOB,
        UNIQUE (conversation_id, position)
    )
    """,
    # Opening a conversation and counting its messages read only visible rows.
    "CREATE INDEX messages_visible ON messages (conversation_id, position) WHERE superseded = 0",
)


def _migrate_1(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA_1:
        conn.execute(statement)


def _migrate_2(conn: sqlite3.Connection) -> None:
    # Full-text search over message text. Without FTS5 the list search falls
    # back to LIKE; `Store._sync_search_index` installs the index later if a
    # SQLite with FTS5 opens the file.
    if search.fts5_available(conn):
        search.install_search_index(conn)


def _migrate_3(conn: sqlite3.Connection) -> None:
    # `writer_pid`: the id of the kvchat process writing a streaming reply, set
    # when its row is first written and cleared by its final write. A row whose
    # writer has exited was cut off (kvchat was killed or crashed mid-reply); one
    # whose writer runs is being written now, in another window. `interrupted`:
    # cut off, as recorded elsewhere (an imported reply). Replies saved before
    # this migration are complete: both columns stay empty.
    conn.execute("ALTER TABLE messages ADD COLUMN writer_pid INTEGER")
    conn.execute("ALTER TABLE messages ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0")


def _migrate_4(conn: sqlite3.Connection) -> None:
    # Conversations become trees. `parent_id`: the message this one follows (NULL:
    # a first message); not a foreign key, like `replaced_by`, so that deleting a
    # message does not scan for its children. `depth`: how many messages come
    # before it on its branch (the list counts the branch shown with it).
    # `token_ids`: a reply's sampled tokens (`_token_ids_blob`). `shown_leaf`: the
    # last message of the branch shown (NULL: the newest message).
    conn.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER")
    conn.execute("ALTER TABLE messages ADD COLUMN depth INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE messages ADD COLUMN token_ids BLOB")
    conn.execute("ALTER TABLE conversations ADD COLUMN shown_leaf INTEGER")
    # The visible messages become one branch, in order; a reply that regenerate
    # replaced (superseded) becomes a sibling of the reply that took its place.
    # `superseded` and `replaced_by` stay as they were but mean nothing from now on.
    conn.execute("DROP INDEX IF EXISTS messages_visible")
    rows = conn.execute(
        "SELECT id, conversation_id, superseded, replaced_by FROM messages "
        "ORDER BY conversation_id, position"
    ).fetchall()
    # id -> (parent id, depth), for visible messages first.
    placed: dict[int, tuple[int | None, int]] = {}
    conversation_of: dict[int, int] = {}
    # Superseded messages: (id, replaced_by, the nearest earlier visible message).
    superseded: list[tuple[int, int | None, int | None]] = []
    last_visible: dict[int, int] = {}  # conversation id -> its last visible message so far
    for message_id, conv_id, is_superseded, replaced_by in rows:
        conversation_of[message_id] = conv_id
        previous = last_visible.get(conv_id)
        if is_superseded:
            superseded.append((message_id, replaced_by, previous))
            continue
        depth = 0 if previous is None else placed[previous][1] + 1
        placed[message_id] = (previous, depth)
        last_visible[conv_id] = message_id
    replacements = {message_id: replaced_by for message_id, replaced_by, _ in superseded}
    for message_id, replaced_by, previous in superseded:
        # Follow the chain of regenerations to the visible reply at its end.
        seen = {message_id}
        target = replaced_by
        while target is not None and target not in placed and target not in seen:
            seen.add(target)
            target = replacements.get(target)
        same_conversation = conversation_of.get(target or 0) == conversation_of[message_id]
        if target is not None and target in placed and same_conversation:
            placed[message_id] = placed[target]
        else:
            depth = 0 if previous is None else placed[previous][1] + 1
            placed[message_id] = (previous, depth)
    conn.executemany(
        "UPDATE messages SET parent_id = ?, depth = ? WHERE id = ?",
        [(parent, depth, message_id) for message_id, (parent, depth) in placed.items()],
    )
    conn.executemany(
        "UPDATE conversations SET shown_leaf = ? WHERE id = ?",
        [(message_id, conv_id) for conv_id, message_id in last_visible.items()],
    )


def _migrate_5(conn: sqlite3.Connection) -> None:
    # What a conversation was made with (issue 17, model servers): `backend` is
    # "local" (the model file in `model_path`) or the kind of server it talked
    # to, `server_url` that server's URL without user name, password or query
    # (`public_url`); an API key is never stored. Every conversation before
    # this migration was made with a local model.
    conn.execute("ALTER TABLE conversations ADD COLUMN backend TEXT NOT NULL DEFAULT 'local'")
    conn.execute("ALTER TABLE conversations ADD COLUMN server_url TEXT NOT NULL DEFAULT ''")


def _migrate_6(conn: sqlite3.Connection) -> None:
    # The preset (chat.settings.presets) a conversation was given, by name, to
    # show it again when the conversation reopens; '' for none. Its system
    # prompt and sampling are in their own columns already.
    conn.execute("ALTER TABLE conversations ADD COLUMN preset TEXT NOT NULL DEFAULT ''")


def _migrate_7(conn: sqlite3.Connection) -> None:
    # Text files attached to a message (chat.conversations.attachments), in
    # order: the name shown and the text sent after the message's own. A row of
    # its own rather than in `content`, so that the message shows as typed, and
    # the prompt is rebuilt byte for byte (the KV cache of a reopened
    # conversation still matches). Deleted with their message.
    conn.execute(
        """
        CREATE TABLE attachments (
            message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
            position   INTEGER NOT NULL,
            name       TEXT NOT NULL,
            text       TEXT NOT NULL,
            PRIMARY KEY (message_id, position)
        )
        """
    )


def _migrate_8(conn: sqlite3.Connection) -> None:
    # A reasoning model's reply (issue 29): `thinking` is its thinking without
    # the markers, '' for a reply that did not think (and for every message
    # before this migration); `content` stays the answer alone, so the search
    # index (over `content`) does not see the thinking. `thinking_tokens` and
    # `first_answer_s` are two more of the reply's stats (ReplyStats), NULL
    # like the others where there are none; a reply saved before this
    # migration reads back with no thinking tokens and no answer time.
    conn.execute("ALTER TABLE messages ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE messages ADD COLUMN thinking_tokens INTEGER")
    conn.execute("ALTER TABLE messages ADD COLUMN first_answer_s REAL")


def _migrate_9(conn: sqlite3.Connection) -> None:
    # A reply that called tools (issue 30) stays one message: `tool_steps` holds
    # its steps before the answer as JSON (chat.conversations.tool_steps), NULL
    # for a reply without (and for every message before this migration);
    # `content` stays the final answer. `tool_text`: the steps' text that search
    # finds (the calls' arguments and results), '' for none, with a full-text
    # index of its own so that the index over `content` is left as it was.
    conn.execute("ALTER TABLE messages ADD COLUMN tool_steps TEXT")
    conn.execute("ALTER TABLE messages ADD COLUMN tool_text TEXT NOT NULL DEFAULT ''")
    if search.fts5_available(conn):
        search.install_tool_search_index(conn)


def _migrate_10(conn: sqlite3.Connection) -> None:
    # The tools a conversation turned off (issue 30: servers and single tools
    # are switched per conversation), as JSON (chat.conversations.tool_switches);
    # '' for all on, which every conversation before this migration had.
    conn.execute("ALTER TABLE conversations ADD COLUMN tools_off TEXT NOT NULL DEFAULT ''")


def _migrate_11(conn: sqlite3.Connection) -> None:
    # Whether a reply ended inside its thinking (`Message.thought_open`): a
    # thought may close on a reply's last tokens, leaving an empty answer
    # too, and going on from it must then start the answer. Rows before this
    # migration read as kvchat read them then: open when the answer is empty.
    conn.execute("ALTER TABLE messages ADD COLUMN thought_open INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE messages SET thought_open = 1 WHERE thinking != '' AND content = ''")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _migrate_1,
    _migrate_2,
    _migrate_3,
    _migrate_4,
    _migrate_5,
    _migrate_6,
    _migrate_7,
    _migrate_8,
    _migrate_9,
    _migrate_10,
    _migrate_11,
]
"""Forward migrations; after running MIGRATIONS[:n], `PRAGMA user_version` is n."""

SCHEMA_VERSION = len(MIGRATIONS)


def upgrade(conn: sqlite3.Connection, path: Path) -> None:
    """Run the migrations the database lacks; inside the caller's write
    transaction, so that another process cannot migrate at the same time."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(path, version, SCHEMA_VERSION)
    for number in range(version + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[number - 1](conn)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
