"""The SQLite store: schema, migrations, saving as it happens, bad files, speed."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import chat.conversations.search as search_module
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import (
    SCHEMA_VERSION,
    ConversationNotFoundError,
    CorruptDatabaseError,
    NewerSchemaError,
    Store,
    move_aside,
)
from tests.conversations.conftest import old_database

REPO_ROOT = Path(__file__).resolve().parents[2]


def stats(**overrides: object) -> ReplyStats:
    values: dict[str, object] = dict(
        prompt_tokens=120,
        prompt_evaluated=20,
        generated_tokens=42,
        ttft_s=0.25,
        decode_tps=31.5,
        finish_reason="done",
        seed=1234,
        total_s=1.6,
    )
    values.update(overrides)
    return ReplyStats(**values)  # type: ignore[arg-type]


def sample_conversation() -> Conversation:
    return Conversation(
        system_prompt="You are terse.",
        title="Greetings",
        model_path="/models/demo.gguf",
        model_name="demo",
        messages=[
            Message("user", "Hello there", token_count=5),
            Message("assistant", "Hi.", token_count=3, stats=stats()),
            Message("user", "Tell me a joke"),
        ],
    )


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


# --- the file ------------------------------------------------------------------------


def test_new_database_is_private_and_in_wal_mode(store: Store, db_path: Path) -> None:
    conv_id = store.create_conversation(sample_conversation())
    assert conv_id > 0
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(db_path.parent.stat().st_mode) == 0o700
    wal = Path(f"{db_path}-wal")
    assert wal.exists() and stat.S_IMODE(wal.stat().st_mode) == 0o600
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_default_path_is_in_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCHAT_DATA_DIR", str(tmp_path / "kv"))
    with Store() as opened:
        assert opened.path == tmp_path / "kv" / "conversations.db"
        assert opened.path.exists()


def test_reopening_keeps_everything(db_path: Path) -> None:
    conv = sample_conversation()
    with Store(db_path) as first:
        conv_id = first.create_conversation(conv, {"temperature": 0.7})
    with Store(db_path) as second:
        assert second.get_conversation(conv_id) == conv
        assert second.get_sampling(conv_id) == {"temperature": 0.7}


# --- saving and reading --------------------------------------------------------------


def test_create_conversation_saves_its_messages(store: Store) -> None:
    conv = sample_conversation()
    conv_id = store.create_conversation(conv, {"temperature": 0.7, "top_p": 0.9})
    assert conv.id == conv_id
    assert all(m.id is not None for m in conv.messages)
    loaded = store.get_conversation(conv_id)
    assert loaded == conv
    assert loaded.messages[1].stats == stats()
    assert store.get_sampling(conv_id) == {"temperature": 0.7, "top_p": 0.9}


def test_add_message_appends_and_bumps_updated(store: Store) -> None:
    conv = Conversation(title="t", updated=1.0)
    conv_id = store.create_conversation(conv)
    first = Message("user", "one")
    second = Message("assistant", "two", parent=first)
    assert store.add_message(conv_id, first) == first.id
    store.add_message(conv_id, second)
    loaded = store.get_conversation(conv_id)
    assert [m.content for m in loaded.messages] == ["one", "two"]
    assert [m.id for m in loaded.messages] == [first.id, second.id]
    assert loaded.messages[1].parent is loaded.messages[0]
    assert loaded.updated > 1.0
    with pytest.raises(ValueError, match="parent must be saved"):
        store.add_message(conv_id, Message("user", "x", parent=Message("user", "unsaved")))


def test_streaming_update_is_one_statement(store: Store) -> None:
    conv_id = store.create_conversation(Conversation())
    reply_id = store.add_message(conv_id, Message("assistant", "", token_count=1))
    statements: list[str] = []
    store.trace(statements.append)
    store.update_message_content(reply_id, "Hel")
    store.trace(None)
    # Lines starting "--" are the FTS triggers' own statements; no BEGIN or COMMIT.
    top_level = {s for s in statements if not s.startswith("--")}
    assert len(top_level) == 1 and top_level.pop().startswith("UPDATE messages SET content")

    # token_count and stats are kept when not given, set when given.
    assert store.get_conversation(conv_id).messages[0].token_count == 1
    store.update_message_content(reply_id, "Hello", token_count=2, stats=stats(seed=None))
    message = store.get_conversation(conv_id).messages[0]
    assert (message.content, message.token_count, message.stats) == ("Hello", 2, stats(seed=None))
    store.update_message_content(reply_id, "Hello!")
    assert store.get_conversation(conv_id).messages[0].stats == stats(seed=None)


def test_a_regenerated_reply_is_a_sibling_and_the_branch_shown_is_kept(store: Store) -> None:
    conv_id = store.create_conversation(Conversation())
    question = Message("user", "Q")
    store.add_message(conv_id, question)
    old = Message("assistant", "first answer", parent=question)
    store.add_message(conv_id, old)
    new = Message("assistant", "second answer", parent=question, token_ids=[1, 2**31 - 1, 0])
    store.add_message(conv_id, new)
    loaded = store.get_conversation(conv_id)
    # The newest write is the end of the branch shown.
    assert [m.content for m in loaded.messages] == ["Q", "second answer"]
    assert loaded.messages[1].token_ids == [1, 2**31 - 1, 0]
    assert [m.id for m in loaded.tree.siblings(loaded.messages[1])] == [old.id, new.id]
    assert len(loaded.tree) == 3
    assert store.list_conversations()[0].message_count == 2

    # Showing the other branch is remembered, and is not a change to the list's order.
    updated = loaded.updated
    assert old.id is not None and new.id is not None
    store.set_shown_leaf(conv_id, old.id)
    again = store.get_conversation(conv_id)
    assert [m.content for m in again.messages] == ["Q", "first answer"]
    assert again.messages[1].token_ids is None
    assert again.updated == updated
    with pytest.raises(ConversationNotFoundError):
        store.set_shown_leaf(conv_id + 1, old.id)
    # Deleting the message shown shows its parent's branch; its parent ends it.
    store.delete_message(old.id)
    assert [m.content for m in store.get_conversation(conv_id).messages] == ["Q", "second answer"]
    assert store.list_conversations()[0].message_count == 1
    with pytest.raises(ConversationNotFoundError):
        store.set_shown_leaf(conv_id, old.id)


def test_delete_message(store: Store) -> None:
    conv = sample_conversation()
    conv_id = store.create_conversation(conv)
    last = conv.messages[-1].id
    assert last is not None
    store.delete_message(last)
    store.delete_message(last)  # already gone: no error
    assert [m.content for m in store.get_conversation(conv_id).messages] == ["Hello there", "Hi."]
    store.add_message(conv_id, Message("user", "again", parent=conv.messages[1]))
    assert store.get_conversation(conv_id).messages[-1].content == "again"


def test_rename_and_settings(store: Store) -> None:
    conv_id = store.create_conversation(sample_conversation(), {"temperature": 0.7})
    store.rename(conv_id, "New title")
    store.update_conversation_settings(
        conv_id, "Be verbose.", {"temperature": 0.0, "seed": 7}, "/m/other.gguf", "other"
    )
    loaded = store.get_conversation(conv_id)
    assert (loaded.title, loaded.system_prompt) == ("New title", "Be verbose.")
    assert (loaded.model_path, loaded.model_name) == ("/m/other.gguf", "other")
    assert store.get_sampling(conv_id) == {"temperature": 0.0, "seed": 7}


def test_delete_conversation_removes_its_messages(store: Store) -> None:
    keep = store.create_conversation(sample_conversation())
    gone = store.create_conversation(sample_conversation())
    store.delete_conversation(gone)
    store.delete_conversation(gone)  # a second delete is harmless
    with raw(store.path) as conn:
        counts = conn.execute("SELECT conversation_id, COUNT(*) FROM messages GROUP BY 1")
        assert counts.fetchall() == [(keep, 3)]
    assert [s.id for s in store.list_conversations("joke")] == [keep]


def test_missing_conversation_raises_a_store_error(store: Store) -> None:
    with pytest.raises(ConversationNotFoundError, match="Conversation 42 is no longer"):
        store.get_conversation(42)
    with pytest.raises(ConversationNotFoundError):
        store.add_message(42, Message("user", "x"))
    with pytest.raises(ConversationNotFoundError):
        store.rename(42, "x")
    with pytest.raises(ConversationNotFoundError):
        store.get_sampling(42)
    with pytest.raises(ConversationNotFoundError):
        store.update_conversation_settings(42, "", {}, "", "")
    with pytest.raises(ConversationNotFoundError, match="Message 42"):
        store.update_message_content(42, "x")


def test_import_is_all_or_nothing(store: Store) -> None:
    conv = sample_conversation()
    conv.append(Message("user", object()))  # type: ignore[arg-type]
    with pytest.raises(sqlite3.Error):
        store.import_conversation(conv, {})
    assert store.list_conversations() == []
    with raw(store.path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


# --- listing and search --------------------------------------------------------------


def test_list_is_newest_first_with_counts(store: Store) -> None:
    assert store.latest_conversation_id() is None
    ids = [store.create_conversation(Conversation(title=f"c{i}")) for i in range(5)]
    store.add_message(ids[1], Message("user", "bump"))
    listed = store.list_conversations()
    assert [s.id for s in listed] == [ids[1], ids[4], ids[3], ids[2], ids[0]]
    assert listed[0].message_count == 1 and listed[1].message_count == 0
    assert store.latest_conversation_id() == ids[1]
    assert [s.id for s in store.list_conversations(limit=2, offset=1)] == [ids[4], ids[3]]


def _search_fixture(store: Store) -> dict[str, int]:
    ids = {
        "title": store.create_conversation(Conversation(title="Rust lifetimes")),
        "text": store.create_conversation(
            Conversation(messages=[Message("user", "How do I bake sourdough bread?")])
        ),
        "odd": store.create_conversation(
            Conversation(messages=[Message("user", 'Use 100% "quoted" under_scores')])
        ),
    }
    # A branch not shown: the first message, then another one beside it.
    store.add_message(ids["title"], Message("user", "a zebra on another branch"))
    store.add_message(ids["title"], Message("user", "the branch shown"))
    return ids


@pytest.mark.parametrize("fts", [True, False], ids=["fts5", "like"])
def test_search_matches_title_and_message_text(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, fts: bool
) -> None:
    if not fts:
        monkeypatch.setattr(search_module, "fts5_available", lambda conn: False)
    with Store(db_path) as opened:
        assert opened.has_fts is fts
        ids = _search_fixture(opened)

        def found(query: str) -> list[int]:
            return [s.id for s in opened.list_conversations(query)]

        assert found("rust") == [ids["title"]]
        assert found("sourdough") == [ids["text"]]
        assert found("BAKE bread") == [ids["text"]]
        assert found("bread pizza") == []
        assert found("zebra") == [ids["title"]]  # every branch is searched
        assert found('"quoted"') == [ids["odd"]]
        assert found("100%") == [ids["odd"]]
        assert found("under_") == [ids["odd"]]
        # A literal percent sign, not a wildcard; FTS5 ignores punctuation.
        assert found("%") == ([] if fts else [ids["odd"]])
        assert found("? bread") == [ids["text"]]
        opened.rename(ids["text"], "50% off?")
        assert found("%") == [ids["text"]] if fts else [ids["odd"], ids["text"]]
        assert found("  ") == found("") and len(found("")) == 3
        for query in ("", "rust", "bread pizza", "%", "sourdough", "zebra"):
            assert opened.count_conversations(query) == len(found(query))


def test_search_index_is_rebuilt_when_fts_comes_back(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(db_path) as opened:
        conv_id = opened.create_conversation(Conversation(title="t"))
    monkeypatch.setattr(search_module, "fts5_available", lambda conn: False)
    with Store(db_path) as without_fts:
        without_fts.add_message(conv_id, Message("user", "zebra crossing"))
    monkeypatch.undo()
    with Store(db_path) as again:
        assert again.has_fts
        assert [s.id for s in again.list_conversations("zebra")] == [conv_id]


# --- migrations and bad files --------------------------------------------------------

# The first schema, written out by hand: what kvchat 0.1 created.
VERSION_1_SCHEMA = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL DEFAULT '', created REAL NOT NULL,
    updated REAL NOT NULL, model_path TEXT NOT NULL DEFAULT '',
    model_name TEXT NOT NULL DEFAULT '', system_prompt TEXT NOT NULL DEFAULT '',
    sampling TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX conversations_by_updated ON conversations (updated DESC, id DESC);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    created REAL NOT NULL, token_count INTEGER, superseded INTEGER NOT NULL DEFAULT 0,
    replaced_by INTEGER, prompt_tokens INTEGER, prompt_evaluated INTEGER,
    generated_tokens INTEGER, ttft_s REAL, decode_tps REAL, finish_reason TEXT,
    seed INTEGER, total_s REAL, token_probs BLOB, UNIQUE (conversation_id, position)
);
CREATE INDEX messages_visible ON messages (conversation_id, position) WHERE superseded = 0;
INSERT INTO conversations
    VALUES (7, 'Old chat', 100.0, 200.0, '/m/a.gguf', 'a', 'Sys', '{"top_k": 40}');
INSERT INTO messages (conversation_id, position, role, content, created, token_count)
    VALUES (7, 0, 'user', 'remember the pelican', 150.0, 4);
INSERT INTO messages (conversation_id, position, role, content, created, token_count,
    prompt_tokens, prompt_evaluated, generated_tokens, ttft_s, decode_tps, finish_reason,
    seed, total_s)
    VALUES (7, 1, 'assistant', 'Noted.', 160.0, 2, 30, 30, 2, 0.5, 10.0, 'done', 3, 0.7);
PRAGMA user_version = 1;
"""


def test_migrates_a_version_1_database(db_path: Path) -> None:
    db_path.parent.mkdir()
    with raw(db_path) as conn:
        conn.executescript(VERSION_1_SCHEMA)
    with Store(db_path) as opened:
        conv = opened.get_conversation(7)
        assert (conv.title, conv.system_prompt, conv.created, conv.updated) == (
            "Old chat",
            "Sys",
            100.0,
            200.0,
        )
        assert [(m.role, m.content, m.token_count) for m in conv.messages] == [
            ("user", "remember the pelican", 4),
            ("assistant", "Noted.", 2),
        ]
        assert conv.messages[1].stats == ReplyStats(30, 30, 2, 0.5, 10.0, "done", 3, 0.7)
        assert opened.get_sampling(7) == {"top_k": 40}
        # Migration 2's search index was filled with the existing messages.
        assert [s.id for s in opened.list_conversations("pelican")] == [7]
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def _old_message(
    conn: sqlite3.Connection, conv_id: int, role: str, content: str, **columns: object
) -> int:
    """A message row as schema 3's kvchat wrote it: appended at the next position."""
    names = ["conversation_id", "position", "role", "content", "created", *columns]
    cursor = conn.execute(
        f"INSERT INTO messages ({', '.join(names)}) VALUES (?, "
        "(SELECT COALESCE(MAX(position), -1) + 1 FROM messages WHERE conversation_id = ?), "
        f"?, ?, ?{', ?' * len(columns)})",
        (conv_id, conv_id, role, content, time.time(), *columns.values()),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _schema_3_database(path: Path) -> dict[str, int]:
    """A database made with schema 3's statements and filled the way its kvchat
    did: regenerated replies superseded (`replaced_by` the reply that took their
    place, twice in a row once), one superseded without a replacement. The ids
    of its messages by text."""
    conn = old_database(path, 3)
    ids: dict[str, int] = {}
    conn.execute(
        "INSERT INTO conversations (id, title, created, updated, sampling) "
        "VALUES (1, 'Soups', 1.0, 5.0, '{}'), (2, 'Other', 1.0, 4.0, '{}')"
    )

    def add(conv_id: int, role: str, content: str, **columns: object) -> None:
        ids[content] = _old_message(conn, conv_id, role, content, **columns)

    def regenerate(old: str, new: str) -> None:
        add(1, "assistant", new)
        conn.execute(
            "UPDATE messages SET superseded = 1, replaced_by = ? WHERE id = ?",
            (ids[new], ids[old]),
        )

    add(1, "user", "Which soup?")
    add(
        1,
        "assistant",
        "Leek.",
        finish_reason="done",
        prompt_tokens=5,
        prompt_evaluated=5,
        generated_tokens=2,
        ttft_s=0.1,
        decode_tps=9.0,
        seed=1,
        total_s=0.3,
    )
    regenerate("Leek.", "Miso.")
    regenerate("Miso.", "Pea.")
    add(1, "user", "Colder?")
    add(1, "assistant", "Gazpacho.")
    conn.execute("UPDATE messages SET superseded = 1 WHERE id = ?", (ids["Gazpacho."],))
    add(1, "assistant", "Vichyssoise.")
    add(2, "user", "Unrelated zebra")
    conn.close()
    return ids


def test_migrating_a_schema_3_database_keeps_every_message_as_a_tree(db_path: Path) -> None:
    ids = _schema_3_database(db_path)
    with Store(db_path) as opened:
        conv = opened.get_conversation(1)
        # What schema 3 showed is the branch shown.
        assert [m.content for m in conv.messages] == [
            "Which soup?",
            "Pea.",
            "Colder?",
            "Vichyssoise.",
        ]
        assert len(conv.tree) == 7 and {m.id for m in conv.tree} == {
            ids[t] for t in ids if t != "Unrelated zebra"
        }
        # Each regenerated reply is a sibling of the one that took its place.
        replies = conv.tree.siblings(conv.messages[1])
        assert [m.content for m in replies] == ["Leek.", "Miso.", "Pea."]
        assert replies[0].stats is not None and replies[0].stats.seed == 1
        # One superseded without a replacement follows the message before it.
        assert [m.content for m in conv.tree.siblings(conv.messages[3])] == [
            "Gazpacho.",
            "Vichyssoise.",
        ]
        assert conv.updated == 5.0
        # Search covers every branch; the list counts the branch shown.
        assert [s.id for s in opened.list_conversations("Leek")] == [1]
        assert [s.id for s in opened.list_conversations("zebra")] == [2]
        assert [s.message_count for s in opened.list_conversations()] == [4, 1]
        # New messages go on after the migrated ones.
        opened.add_message(1, Message("user", "Thanks", parent=conv.messages[-1]))
        assert [m.content for m in opened.get_conversation(1).messages][-2:] == [
            "Vichyssoise.",
            "Thanks",
        ]
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 9
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_search_finds_text_on_a_branch_not_shown(store: Store) -> None:
    conv = Conversation(messages=[Message("user", "Q"), Message("assistant", "pelican")])
    conv_id = store.create_conversation(conv)
    other = Message("assistant", "albatross", parent=conv.messages[0])
    store.add_message(conv_id, other)
    assert [m.content for m in store.get_conversation(conv_id).messages] == ["Q", "albatross"]
    assert [s.id for s in store.list_conversations("pelican")] == [conv_id]


def test_newer_schema_is_refused_and_left_alone(db_path: Path) -> None:
    db_path.parent.mkdir()
    with raw(db_path) as conn:
        conn.execute("CREATE TABLE future (x)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = db_path.read_bytes()
    with pytest.raises(NewerSchemaError) as error:
        Store(db_path)
    assert str(db_path) in str(error.value) and "newer version of kvchat" in str(error.value)
    assert error.value.path == db_path
    assert db_path.read_bytes() == before


def _damaged_kvchat_database(path: Path) -> None:
    with Store(path) as opened:
        for i in range(20):
            opened.create_conversation(
                Conversation(messages=[Message("user", f"message {i} " * 200)])
            )
    data = bytearray(path.read_bytes())
    data[4096 * 3 : 4096 * 6] = bytes((i * 7 + 3) % 256 for i in range(4096 * 3))
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_text("these are my notes, not a database\n"),
        lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8000),
        _damaged_kvchat_database,
        lambda p: sqlite3.connect(p).execute("CREATE TABLE other_app (x)").connection.close(),
    ],
    ids=["text-file", "bad-header-pages", "damaged-pages", "another-apps-db"],
)
def test_corrupt_file_is_refused_and_left_alone(db_path: Path, make: object) -> None:
    db_path.parent.mkdir()
    make(db_path)  # type: ignore[operator]
    before = db_path.read_bytes()
    with pytest.raises(CorruptDatabaseError) as error:
        Store(db_path)
    message = str(error.value)
    assert str(db_path) in message and "move it aside" in message
    assert db_path.read_bytes() == before


def test_move_aside_renames_the_files_and_never_overwrites(db_path: Path) -> None:
    db_path.parent.mkdir()
    db_path.write_text("junk")
    Path(f"{db_path}-wal").write_text("wal")
    Path(f"{db_path}-shm").write_text("shm")
    first = move_aside(db_path)
    assert re.fullmatch(r"conversations\.db\.corrupt-\d{8}-\d{6}", first.name)
    assert first.read_text() == "junk"
    assert Path(f"{first}-wal").read_text() == "wal"
    assert Path(f"{first}-shm").read_text() == "shm"
    assert not db_path.exists() and not Path(f"{db_path}-wal").exists()

    db_path.write_text("more junk")
    second = move_aside(db_path)
    assert second != first and second.read_text() == "more junk"
    assert first.read_text() == "junk"
    with Store(db_path) as fresh:  # a new, empty database in its place
        assert fresh.list_conversations() == []


# --- two writers, a killed writer ----------------------------------------------------


def test_two_stores_write_concurrently(db_path: Path) -> None:
    Store(db_path).close()
    stores = [Store(db_path), Store(db_path)]
    conv_id = stores[0].create_conversation(Conversation(title="shared"))
    errors: list[BaseException] = []

    def writer(opened: Store, name: str) -> None:
        try:
            previous = None
            for i in range(150):
                # Each writer continues its own branch.
                previous = Message("user", f"{name} {i}", parent=previous)
                message_id = opened.add_message(conv_id, previous)
                opened.update_message_content(message_id, f"{name} {i} edited")
                opened.create_conversation(Conversation(title=f"{name} {i}"))
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=writer, args=(opened, name))
        for opened, name in zip(stores, "ab", strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    tree = stores[1].get_conversation(conv_id).tree
    assert len(tree) == 300 and all(m.content.endswith("edited") for m in tree)
    assert [len(tree.path_to(leaf)) for leaf in tree.leaves()] == [150, 150]
    assert len(stores[0].list_conversations(limit=1000)) == 301
    for opened in stores:
        opened.close()
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# Saves a growing reply the way the app does, and reports each write once it
# has returned (so is committed) on stdout.
STREAMING_WRITER = """
import sys, time
from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store

store = Store(sys.argv[1])
conv_id = store.create_conversation(Conversation(title="killed mid-reply"))
question = Message("user", "Count for me")
store.add_message(conv_id, question)
reply_id = store.add_message(conv_id, Message("assistant", "", parent=question))
text = ""
for n in range(1, 100_000):
    text += f"tick {n}\\n"
    store.update_message_content(reply_id, text)
    print(n, flush=True)
    time.sleep(0.02)  # the simulated time until the reply's next piece
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_sigkill_while_streaming_loses_at_most_the_last_write(db_path: Path) -> None:
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath)
    process = subprocess.Popen(
        [sys.executable, "-c", STREAMING_WRITER, str(db_path)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    reported: list[int] = []  # the writes done, as the writer reports them
    try:
        while len(reported) < 5:  # killed once five are done
            line = process.stdout.readline()
            assert line, "the writer stopped before it was killed"
            reported.append(int(line))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    reported += map(int, process.stdout.read().split())  # reported before it died
    done = reported[-1]

    with raw(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Store(db_path) as opened:
        conv_id = opened.latest_conversation_id()
        assert conv_id is not None
        user, reply = opened.get_conversation(conv_id).messages
        assert (user.role, user.content) == ("user", "Count for me")
        ticks = [int(line.removeprefix("tick ")) for line in reply.content.splitlines()]
        # Every write that was done is there, and at most the one under way besides.
        assert ticks == list(range(1, len(ticks) + 1))
        assert done <= len(ticks) <= done + 1


# --- speed ---------------------------------------------------------------------------


def best_of(runs: int, action: object) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def test_opening_a_2000_message_conversation_is_fast(store: Store) -> None:
    conv = Conversation(
        messages=[
            Message(
                "user" if i % 2 == 0 else "assistant",
                f"message {i} " + "lorem ipsum " * 40,
                token_count=50,
                stats=None if i % 2 == 0 else stats(),
            )
            for i in range(2000)
        ]
    )
    conv_id = store.create_conversation(conv)
    assert len(store.get_conversation(conv_id).messages) == 2000
    assert best_of(3, lambda: store.get_conversation(conv_id)) < 0.1


def test_opening_a_100000_message_tree_is_fast_enough(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the search index: the test measures reading, not indexing 100,000 rows.
    monkeypatch.setattr(search_module, "fts5_available", lambda conn: False)
    store = Store(db_path)
    # Bulk rows: one long branch, and every tenth reply regenerated once beside it.
    rows: list[tuple[int, int, int | None, int, str]] = []
    parent = None
    for i in range(1, 100_001):
        if i % 11 == 0:  # beside the message before it: the same parent
            rows.append((i, i - 1, rows[-1][2], rows[-1][3], f"alternative {i}"))
            continue
        depth = 0 if parent is None else rows[parent - 1][3] + 1
        rows.append((i, i - 1, parent, depth, f"message {i}"))
        parent = i
    with raw(store.path) as conn:
        conn.execute("INSERT INTO conversations (id, created, updated) VALUES (1, 0, 0)")
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, "
            "content, created) VALUES (?, 1, ?, ?, ?, 'user', ?, 0)",
            rows,
        )
    start = time.perf_counter()
    conv = store.get_conversation(1)
    took = time.perf_counter() - start
    assert len(conv.tree) == 100_000
    assert len(conv.messages) == 100_000 - 100_000 // 11  # the newest branch: no alternatives
    assert conv.messages[-1].id == 100_000
    assert store.list_conversations()[0].message_count == len(conv.messages)
    store.close()
    # About 2 s on a busy 2-CPU machine: a limit for a regression, not a target.
    assert took < 10.0, f"{took:.2f} s"


def test_listing_10000_conversations_is_fast(store: Store) -> None:
    # Bulk rows straight into the tables: the test measures reading, not 10,000 commits.
    with raw(store.path) as conn:
        conn.executemany(
            "INSERT INTO conversations (id, title, created, updated, model_name) "
            "VALUES (?, ?, ?, ?, 'demo')",
            [(i, f"Conversation {i}", i, 1_000_000 + i) for i in range(1, 10_001)],
        )
        # Message 2i-1 asks, 2i answers it.
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, "
            "content, created) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            [
                (
                    2 * i - 1 + p,
                    i,
                    p,
                    2 * i - 1 if p else None,
                    p,
                    role,
                    f"{role} says item{i} " + "filler text " * 20,
                )
                for i in range(1, 10_001)
                for p, role in enumerate(("user", "assistant"))
            ],
        )
    first_page = store.list_conversations()
    assert len(first_page) == 200
    assert [s.id for s in first_page[:3]] == [10_000, 9_999, 9_998]
    assert first_page[0].message_count == 2
    assert [s.id for s in store.list_conversations("item1234")] == [1234]
    assert best_of(3, store.list_conversations) < 0.1
    assert best_of(3, lambda: store.list_conversations("item1234")) < 0.1
    assert best_of(3, lambda: store.list_conversations("filler", offset=9_900)) < 0.5
    assert best_of(3, store.latest_conversation_id) < 0.01


def test_store_imports_no_ui_or_engine() -> None:
    # `chat --list`, `--export` and `--import` read and write conversations only:
    # they answer without loading the UI toolkit or llama.cpp.
    code = (
        "import sys, chat.conversations.store, chat.conversations.transcript; "
        "print(sorted({'textual', 'llama_cpp'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_an_id_past_sqlites_integers_names_no_conversation(store: Store) -> None:
    # SQLite cannot bind it: an OverflowError came out of the store.
    saved = store.create_conversation(sample_conversation())
    with pytest.raises(ConversationNotFoundError):
        store.get_conversation(10**25)
    assert store.titles([saved, 10**25, -(10**25)]) == {saved: sample_conversation().title}
