"""SQLite persistence for conversations: schema, migrations, saving as it happens.

Every write commits at once (WAL mode, short transactions), so killing kvchat
loses at most the write in flight. Two kvchat processes may share the file:
SQLite's locking serialises them and `busy_timeout` makes the loser wait
instead of failing. No Textual and no llama_cpp here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from chat import paths
from chat.conversations.attachments import Attachment
from chat.conversations.conversation import (
    BACKENDS,
    LOCAL_BACKEND,
    Conversation,
    FinishReason,
    Message,
    ReplyState,
    ReplyStats,
    Role,
    TokenChoice,
)
from chat.conversations.token_probs_codec import StoredTokenChoices, encode_token_probs
from chat.conversations.tree import MessageTree
from chat.errors import StoreError
from chat.settings.server import public_url, split_credentials

BUSY_TIMEOUT_S = 5.0
"""How long a write waits for another kvchat process to finish its own."""

_SQLITE_MAGIC = b"SQLite format 3\x00"


class CorruptDatabaseError(StoreError):
    """The file is not a SQLite database, is damaged, or belongs to another program."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"The conversation database {path} cannot be read: {detail}. "
            "kvchat has not changed it. kvchat can move it aside "
            f"(renamed to {path.name}.corrupt-<date>) and start a new, empty database, "
            "or you can quit and restore the file from a backup."
        )


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


# --- schema -------------------------------------------------------------------------

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

# An external-content FTS5 index over message text, kept in step by triggers.
_FTS_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts "
    "USING fts5(content, content='messages', content_rowid='id')"
)
_FTS_TRIGGERS = {
    "messages_fts_insert": """
        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
        END
    """,
    "messages_fts_delete": """
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts (messages_fts, rowid, content)
                VALUES ('delete', old.id, old.content);
        END
    """,
    "messages_fts_update": """
        CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
            INSERT INTO messages_fts (messages_fts, rowid, content)
                VALUES ('delete', old.id, old.content);
            INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
        END
    """,
}


def _fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this Python's SQLite was built with FTS5 (most are; not all)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.kvchat_fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.kvchat_fts5_probe")
    except sqlite3.OperationalError:
        return False
    return True


def _install_search_index(conn: sqlite3.Connection) -> None:
    """Create (or re-create) the FTS index and its triggers, then fill it."""
    conn.execute(_FTS_TABLE)
    for name, sql in _FTS_TRIGGERS.items():
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(sql)
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")


def _migrate_1(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA_1:
        conn.execute(statement)


def _migrate_2(conn: sqlite3.Connection) -> None:
    # Full-text search over message text. Without FTS5 the list search falls
    # back to LIKE; `Store._sync_search_index` installs the index later if a
    # SQLite with FTS5 opens the file.
    if _fts5_available(conn):
        _install_search_index(conn)


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


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _migrate_1,
    _migrate_2,
    _migrate_3,
    _migrate_4,
    _migrate_5,
    _migrate_6,
    _migrate_7,
]
"""Forward migrations; after running MIGRATIONS[:n], `PRAGMA user_version` is n."""

SCHEMA_VERSION = len(MIGRATIONS)


# --- opening ------------------------------------------------------------------------


def _create_file(path: Path) -> None:
    """Make the data folder (0700) and an empty database file (0600) if missing.

    The file is created before SQLite sees it so that it never exists, even for
    a moment, with wider permissions; SQLite gives -wal and -shm the same mode.
    """
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
            os.chmod(path.parent, 0o700)  # mkdir's mode is filtered by the umask
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError as error:
        problem = paths.folder_problem(path.parent, error)
        raise StoreError(
            f"kvchat cannot create its conversation database {path}: {problem}. "
            "Fix that, or set KVCHAT_DATA_DIR to another folder.",
            brief=problem,
        ) from error


def _check_existing(path: Path, quick_check: bool) -> None:
    """Look at an existing file without changing it: raise if kvchat must not use it."""
    try:
        with open(path, "rb") as file:
            header = file.read(100)
    except OSError as error:
        raise StoreError(
            f"kvchat cannot read its conversation database {path}: {error.strerror}. "
            "Check the file's permissions."
        ) from error
    if not header:
        return  # empty: a new database (or one whose creation was interrupted)
    if not header.startswith(_SQLITE_MAGIC):
        raise CorruptDatabaseError(path, "it is not a SQLite database")
    # A read-only connection: nothing we do here can write to the file.
    uri = path.absolute().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as error:
        raise _folder_fault(path) or CorruptDatabaseError(path, str(error)) from error
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(path, version, SCHEMA_VERSION)
        if version == 0 and {t for t in tables if not t.startswith("sqlite_")}:
            raise CorruptDatabaseError(path, "it holds tables that kvchat did not create")
        if quick_check:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise CorruptDatabaseError(path, "; ".join(problems))
    except sqlite3.OperationalError as error:
        if _is_busy(error):
            raise _busy_error(path) from error
        raise _folder_fault(path) or CorruptDatabaseError(path, str(error)) from error
    except sqlite3.DatabaseError as error:
        raise _folder_fault(path) or CorruptDatabaseError(path, str(error)) from error
    finally:
        conn.close()


def _folder_fault(path: Path) -> StoreError | None:
    """Why SQLite could not open a sound database, when the cause is its folder.

    SQLite keeps `-wal` and `-shm` files beside the database even to read it, so
    a read-only or full folder makes a healthy file fail to open ("unable to open
    database file", "disk I/O error"): that must not be taken for damage.
    """
    try:
        with tempfile.TemporaryFile(dir=path.parent) as probe:
            probe.write(bytes(4096))  # a page: a full disk refuses it
            probe.flush()
            os.fsync(probe.fileno())
            return None
    except OSError as error:
        problem = paths.folder_problem(path.parent, error)
        return StoreError(
            f"kvchat cannot open its conversation database {path}: {problem}. "
            "The database itself is untouched.",
            brief=problem,
        )


def _is_busy(error: sqlite3.Error) -> bool:
    name = getattr(error, "sqlite_errorname", "")  # Python 3.11+
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(error)


def _busy_error(path: Path) -> StoreError:
    return StoreError(
        f"The conversation database {path} stayed locked by another program for "
        f"{BUSY_TIMEOUT_S:g} seconds. Close other kvchat windows using it and try again."
    )


def _translate(path: Path, error: sqlite3.DatabaseError) -> Exception:
    """A StoreError for what the user can fix; programming errors pass through."""
    if isinstance(error, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
        return error
    name = getattr(error, "sqlite_errorname", "")
    text = str(error)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text:
        return CorruptDatabaseError(path, text)
    if _is_busy(error):
        return _busy_error(path)
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return StoreError(
            f"The disk holding {path} is full. Free some space and try again.",
            brief=f"the disk holding {path.parent} is full",
        )
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return StoreError(
            f"kvchat cannot write to its conversation database {path}: the file or its "
            "folder is read-only. Make it writable, or set KVCHAT_DATA_DIR to another folder.",
            brief=f"{path.parent} is read-only",
        )
    return StoreError(
        f"kvchat cannot use its conversation database {path}: {text}. "
        "Check that the disk is present and that you may write to the file.",
        brief=f"{path}: {text}",
    )


def move_aside(path: Path) -> Path:
    """Rename a database the user agreed to give up, with its -wal and -shm.

    `x.db` becomes `x.db.corrupt-YYYYmmdd-HHMMSS` (and `...-wal`, `...-shm`, so
    SQLite still pairs them if someone opens the kept file). Returns the new path.
    Never overwrites: a numeric suffix is added if that name is taken.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while any(Path(f"{target}{s}").exists() for s in ("", "-wal", "-shm")):
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    try:
        for suffix in ("-wal", "-shm", ""):  # the main file last: it is what counts
            source = Path(f"{path}{suffix}")
            if source.exists():
                source.rename(f"{target}{suffix}")
    except OSError as error:
        raise StoreError(
            f"kvchat cannot rename {path} to {target}: {error.strerror}. "
            "Move or delete the file yourself, then start kvchat again."
        ) from error
    return target


# --- rows <-> values ----------------------------------------------------------------

_MESSAGE_COLUMNS = (
    "id, role, content, created, token_count, prompt_tokens, prompt_evaluated, "
    "generated_tokens, ttft_s, decode_tps, finish_reason, seed, total_s, token_probs, "
    "writer_pid, interrupted, token_ids, parent_id"
)


def _message_tree(
    conn: sqlite3.Connection, conv_id: int
) -> tuple[MessageTree[Message], dict[int, Message]]:
    """Every message of a conversation, every branch, and each one by its id."""
    # Positions grow with each message written: a parent always comes before its
    # children. A parent that is missing (it cannot be, short of editing the file
    # by hand) makes its children first messages rather than losing them.
    rows = conn.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY position",
        (conv_id,),
    ).fetchall()
    by_id: dict[int, Message] = {}
    tree: MessageTree[Message] = MessageTree()
    for row in rows:
        message = _message_from_row(row)
        parent_id = row[17]
        message.parent = None if parent_id is None else by_id.get(parent_id)
        by_id[row[0]] = message
        tree.add(message)
    attached: dict[int, list[Attachment]] = {}
    for message_id, name, text in conn.execute(
        "SELECT a.message_id, a.name, a.text FROM attachments a "
        "JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = ? "
        "ORDER BY a.message_id, a.position",
        (conv_id,),
    ):
        attached.setdefault(message_id, []).append(Attachment(name, text))
    for message_id, attachments in attached.items():
        if message_id in by_id:
            by_id[message_id].attachments = tuple(attachments)
    return tree, by_id


def _message_from_row(row: tuple[Any, ...]) -> Message:
    (id_, role, content, created, token_count, prompt_tokens, prompt_evaluated) = row[:7]
    generated_tokens, ttft_s, decode_tps, finish_reason, seed, total_s = row[7:13]
    token_probs, writer_pid, interrupted, token_ids = row[13:17]
    stats = None
    if finish_reason is not None:  # a reply with stats always has a finish reason
        stats = ReplyStats(
            prompt_tokens=prompt_tokens,
            prompt_evaluated=prompt_evaluated,
            generated_tokens=generated_tokens,
            ttft_s=ttft_s,
            decode_tps=decode_tps,
            finish_reason=cast(FinishReason, finish_reason),
            seed=seed,
            total_s=total_s,
        )
    return Message(
        role=cast(Role, role),
        content=content,
        created=created,
        token_count=token_count,
        stats=stats,
        id=id_,
        # Decoded only when the token view reads it: opening a long conversation
        # does not pay for every reply's probabilities.
        token_probs=None if token_probs is None else StoredTokenChoices(bytes(token_probs)),
        state=_reply_state(writer_pid, interrupted),
        token_ids=None if token_ids is None else _token_ids_from_blob(token_ids),
    )


def _reply_state(writer_pid: int | None, interrupted: int) -> ReplyState:
    if interrupted:
        return "interrupted"
    if writer_pid is None:
        return "complete"
    return "writing" if _is_running(writer_pid) else "interrupted"


def _is_running(pid: int) -> bool:
    """Whether the process that is writing a reply still runs: then the reply is
    being written now (another kvchat window), not cut off.

    A pid that another process took since reads as running: that reply is then
    shown as it is, unmarked, as before kvchat recorded writers.
    """
    if pid <= 0:
        return False
    if os.name == "nt":
        return True  # there os.kill would end the process instead of probing it
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, only whether the process exists
    except ProcessLookupError:
        return False
    except OSError:
        return True  # e.g. PermissionError: it runs, as another user
    return True


def _stats_values(stats: ReplyStats | None) -> tuple[Any, ...]:
    if stats is None:
        return (None,) * 8
    return (
        stats.prompt_tokens,
        stats.prompt_evaluated,
        stats.generated_tokens,
        stats.ttft_s,
        stats.decode_tps,
        stats.finish_reason,
        stats.seed,
        stats.total_s,
    )


def _token_probs_value(choices: Sequence[TokenChoice] | None) -> bytes | None:
    return None if choices is None else encode_token_probs(choices)


def _token_ids_blob(token_ids: Sequence[int] | None) -> bytes | None:
    """Token ids as 32-bit little-endian integers: 4 bytes a token."""
    if token_ids is None:
        return None
    values = array("i", token_ids)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def _token_ids_from_blob(blob: bytes) -> list[int] | None:
    """`_token_ids_blob` read back; None (as if not recorded) for a damaged value."""
    values = array("i")
    if values.itemsize != 4 or len(blob) % 4:
        return None
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def _backend_value(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    return backend


def _model_path_value(path: str) -> str:
    """The model's path as stored: for a model server, its URL made a path,
    never with a user name or password (databases before issue 27 held them)."""
    return split_credentials(path)[0]


def _server_url_value(url: str) -> str:
    """The server URL as stored: never a user name, password or query, even if
    the caller's conversation holds one."""
    return public_url(url) if url else ""


def _sampling_json(sampling: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(sampling or {}))


def _sampling_from_json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _like_pattern(text: str) -> str:
    """`%text%` for LIKE ... ESCAPE '\\', with the user's % and _ taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _fts_query(terms: list[str]) -> str:
    """Each word as a quoted prefix term (so FTS syntax in the query is just text)."""
    return " ".join('"' + term.replace('"', '""') + '"*' for term in terms)


# --- the store ----------------------------------------------------------------------


class Store:
    """The conversation database. Thread-safe: one connection behind a lock."""

    def __init__(self, path: Path | str | None = None, *, quick_check: bool = True) -> None:
        self.path = Path(path) if path is not None else paths.database_file()
        _create_file(self.path)
        _check_existing(self.path, quick_check)
        self._lock = threading.RLock()
        # isolation_level=None: autocommit; multi-statement writes use explicit
        # BEGIN IMMEDIATE ... COMMIT (see `_write`).
        self._conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            with self._translate_errors():
                self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
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

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as error:
            translated = _translate(self.path, error)
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
            # Read again under the write lock: another process may have migrated.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise NewerSchemaError(self.path, version, SCHEMA_VERSION)
            for number in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[number - 1](conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _sync_search_index(self) -> bool:
        """Match the FTS index to this SQLite: returns whether FTS search is usable.

        A file may be opened by Pythons with and without FTS5. Without it the
        triggers would make every message write fail, so they are dropped; a later
        open with FTS5 sees them missing and rebuilds the index from the messages.
        """
        available = _fts5_available(self._conn)
        rows = self._conn.execute(
            "SELECT name FROM sqlite_master WHERE name = 'messages_fts' OR "
            "(type = 'trigger' AND name LIKE 'messages\\_fts\\_%' ESCAPE '\\')"
        )
        present = {row[0] for row in rows}
        complete = present >= {"messages_fts", *_FTS_TRIGGERS}
        if available and not complete:
            with self._write() as conn:
                _install_search_index(conn)
        elif not available and present & set(_FTS_TRIGGERS):
            with self._write() as conn:
                for name in _FTS_TRIGGERS:
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
            cursor = conn.execute(
                "INSERT INTO messages (conversation_id, position, parent_id, depth, role, "
                "content, created, token_count, prompt_tokens, prompt_evaluated, "
                "generated_tokens, ttft_s, decode_tps, finish_reason, seed, total_s, "
                "token_probs, writer_pid, interrupted, token_ids) VALUES (?, "
                "(SELECT COALESCE(MAX(position), -1) + 1 FROM messages "
                "WHERE conversation_id = ?), ?, "
                "COALESCE((SELECT depth + 1 FROM messages WHERE id = ?), 0), "
                "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conv_id,
                    conv_id,
                    parent_id,
                    parent_id,
                    message.role,
                    message.content,
                    message.created,
                    message.token_count,
                    *_stats_values(message.stats),
                    _token_probs_value(message.token_probs),
                    os.getpid() if message.state == "writing" else None,
                    int(message.state == "interrupted"),
                    _token_ids_blob(message.token_ids),
                ),
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
            "system_prompt, sampling, backend, server_url, preset) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                conv.title,
                conv.created,
                conv.updated,
                _model_path_value(conv.model_path),
                conv.model_name,
                conv.system_prompt,
                _sampling_json(sampling),
                _backend_value(conv.backend),
                _server_url_value(conv.server_url),
                conv.preset,
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
                    if row is not None and row[0] != seen_updated:
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
        done: bool = False,
    ) -> None:
        """Save a streaming reply's text so far: one UPDATE, committed at once.

        `token_count`, `stats`, `token_probs` and `token_ids` are left as they are
        when not given. `done`: the reply's final write; from now on it reads as
        complete.
        """
        assignments = ["content = ?", "token_count = COALESCE(?, token_count)"]
        params: list[Any] = [content, token_count]
        if stats is not None:
            assignments.append(
                "prompt_tokens = ?, prompt_evaluated = ?, generated_tokens = ?, ttft_s = ?, "
                "decode_tps = ?, finish_reason = ?, seed = ?, total_s = ?"
            )
            params += _stats_values(stats)
        if token_probs is not None:
            assignments.append("token_probs = ?")
            params.append(encode_token_probs(token_probs))
        if token_ids is not None:
            assignments.append("token_ids = ?")
            params.append(_token_ids_blob(token_ids))
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
    ) -> None:
        """Record the conversation's own settings and what it is continued with.
        `backend`, `server_url` and `preset` (see `Conversation`) stay as they
        are when not given."""
        assignments = "system_prompt = ?, sampling = ?, model_path = ?, model_name = ?"
        params: list[Any] = [
            system_prompt,
            _sampling_json(sampling),
            _model_path_value(model_path),
            model_name,
        ]
        if backend is not None:
            assignments += ", backend = ?"
            params.append(_backend_value(backend))
        if server_url is not None:
            assignments += ", server_url = ?"
            params.append(_server_url_value(server_url))
        if preset is not None:
            assignments += ", preset = ?"
            params.append(preset)
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
                "shown_leaf, backend, server_url, preset FROM conversations WHERE id = ?",
                (conv_id,),
            ).fetchone()
            if row is None:
                raise self._missing(conv_id)
            tree, by_id = _message_tree(conn, conv_id)
        title, created, updated, model_path, model_name, system_prompt, shown_leaf = row[:7]
        backend, server_url, preset = row[7:10]
        shown = by_id.get(shown_leaf) if shown_leaf is not None else None
        leaf = tree.latest_leaf(shown) if shown is not None else tree.newest_leaf()
        return Conversation(
            system_prompt=system_prompt,
            messages=[] if leaf is None else tree.path_to(leaf),
            title=title,
            id=conv_id,
            created=created,
            updated=updated,
            model_path=model_path,
            model_name=model_name,
            tree=tree,
            backend=backend,
            server_url=server_url,
            preset=preset,
        )

    def get_sampling(self, conv_id: int) -> dict[str, Any]:
        """The sampling settings saved with the conversation."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT sampling FROM conversations WHERE id = ?", (conv_id,)
            ).fetchone()
        if row is None:
            raise self._missing(conv_id)
        return _sampling_from_json(row[0])

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
        where, params = self._search_clause(query.strip()) if query.strip() else ("", [])
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
        return [ConversationSummary(*row) for row in rows]

    def count_conversations(self, query: str = "") -> int:
        """How many conversations `list_conversations(query)` pages through."""
        where, params = self._search_clause(query.strip()) if query.strip() else ("", [])
        with self._read() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM conversations c {where}", params).fetchone()
        return int(row[0])

    def _search_clause(self, query: str) -> tuple[str, list[Any]]:
        title = "c.title LIKE ? ESCAPE '\\'"
        terms = query.split()
        if self.has_fts:
            # The FTS tokenizer ignores punctuation, so a term without a letter or
            # digit would match nothing and, ANDed in, hide every result.
            terms = [term for term in terms if any(ch.isalnum() for ch in term)]
            if not terms:
                return f"WHERE {title}", [_like_pattern(query)]
            messages = (
                "SELECT m.conversation_id FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                "WHERE messages_fts MATCH ?"
            )
            return (
                f"WHERE {title} OR c.id IN ({messages})",
                [_like_pattern(query), _fts_query(terms)],
            )
        words = " AND ".join("m.content LIKE ? ESCAPE '\\'" for _ in terms)
        messages = f"SELECT m.conversation_id FROM messages m WHERE {words}"
        return (
            f"WHERE {title} OR c.id IN ({messages})",
            [_like_pattern(query), *(_like_pattern(t) for t in terms)],
        )
