"""Fixtures and helpers for the conversation store's tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.conversations.store import MIGRATIONS, Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the database goes; its folder does not exist yet."""
    return tmp_path / "data" / "conversations.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(db_path) as opened:
        yield opened


def old_database(path: Path, version: int) -> sqlite3.Connection:
    """A new database at `path` made with the statements of schema `version`,
    as that version's kvchat made it, open (autocommit) for the rows to fill."""
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for migrate in MIGRATIONS[:version]:
        migrate(conn)
    conn.execute(f"PRAGMA user_version = {version}")
    return conn
