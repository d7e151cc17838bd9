"""Fixtures and helpers for the conversation store's tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver, ConversationSettings
from chat.conversations.store import MIGRATIONS, Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the database goes; its folder does not exist yet."""
    return tmp_path / "data" / "conversations.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(db_path) as opened:
        yield opened


def saver_for(store: Store) -> ConversationSaver:
    """A saver writing to `store`; a report of a failed write fails the test."""
    saver = ConversationSaver(lambda text: pytest.fail(text))
    saver.attach(store)
    return saver


def question(
    saver: ConversationSaver,
    conv: Conversation,
    settings: ConversationSettings,
    text: str = "What is 2+2?",
) -> None:
    """The user asks `text` at the end of the branch shown, saved as the app does."""
    conv.append(Message("user", text))
    assert saver.save_messages(conv, settings)


def old_database(path: Path, version: int) -> sqlite3.Connection:
    """A new database at `path` made with the statements of schema `version`,
    as that version's kvchat made it, open (autocommit) for the rows to fill."""
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for migrate in MIGRATIONS[:version]:
        migrate(conn)
    conn.execute(f"PRAGMA user_version = {version}")
    return conn


def insert_a_question(conn: sqlite3.Connection) -> None:
    """Conversation 1, "Sums", with its first message (id 1) "What is 2+2?",
    in the columns every schema has; the reply (id 2, shown) is the test's."""
    conn.execute(
        "INSERT INTO conversations (id, title, created, updated, sampling, shown_leaf) "
        "VALUES (1, 'Sums', 1.0, 5.0, '{}', 2)"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, content, "
        "created, token_count) VALUES (1, 1, 0, NULL, 0, 'user', 'What is 2+2?', 2.0, 6)"
    )
