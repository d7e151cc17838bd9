"""Searching saved conversations: an FTS5 index over message text, and one
over the text of tool calls (their arguments and results, `messages.tool_text`),
kept in step by triggers, and the filter the conversation list pages through
(LIKE where this Python's SQLite has no FTS5).
"""

from __future__ import annotations

import sqlite3
from typing import Any


def _index(table: str, column: str, prefix: str) -> tuple[str, dict[str, str]]:
    """An FTS5 index of `messages.<column>` (its text stays in `messages`: an
    external-content table), and the triggers that keep it in step, named
    `prefix` + insert, delete, update."""
    create = (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} "
        f"USING fts5({column}, content='messages', content_rowid='id')"
    )
    add = f"INSERT INTO {table} (rowid, {column}) VALUES (new.id, new.{column});"
    drop = (
        f"INSERT INTO {table} ({table}, rowid, {column}) VALUES ('delete', old.id, old.{column});"
    )
    triggers = {
        f"{prefix}insert": f"CREATE TRIGGER {prefix}insert AFTER INSERT ON messages "
        f"BEGIN {add} END",
        f"{prefix}delete": f"CREATE TRIGGER {prefix}delete AFTER DELETE ON messages "
        f"BEGIN {drop} END",
        f"{prefix}update": f"CREATE TRIGGER {prefix}update AFTER UPDATE OF {column} ON messages "
        f"BEGIN {drop} {add} END",
    }
    return create, triggers


FTS_TABLE, FTS_TRIGGERS = _index("messages_fts", "content", "messages_fts_")
# Named like the others (`messages_fts_*`): the store finds them all by that name.
TOOL_FTS_TABLE, TOOL_FTS_TRIGGERS = _index("messages_tool_fts", "tool_text", "messages_fts_tool_")
SEARCH_TABLES = ("messages_fts", "messages_tool_fts")


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this Python's SQLite was built with FTS5 (most are; not all)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.kvchat_fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.kvchat_fts5_probe")
    except sqlite3.OperationalError:
        return False
    return True


def install_search_index(conn: sqlite3.Connection) -> None:
    """Create (or re-create) the FTS index and its triggers, then fill it."""
    _install(conn, "messages_fts", FTS_TABLE, FTS_TRIGGERS)


def install_tool_search_index(conn: sqlite3.Connection) -> None:
    """The same for the text of tool calls (schema 9 and later)."""
    _install(conn, "messages_tool_fts", TOOL_FTS_TABLE, TOOL_FTS_TRIGGERS)


def _install(conn: sqlite3.Connection, table: str, create: str, triggers: dict[str, str]) -> None:
    conn.execute(create)
    for name, sql in triggers.items():
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(sql)
    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('rebuild')")


def search_clause(query: str, has_fts: bool) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of the conversations whose title
    or any message matches `query`: every word, as a word prefix with FTS5
    (punctuation is ignored), as a substring without; in a message's text, or
    in the text of its tool calls (all the words in one or the other). No
    clause for a blank query."""
    query = query.strip()
    if not query:
        return "", []
    title = "c.title LIKE ? ESCAPE '\\'"
    terms = query.split()
    if has_fts:
        # The FTS tokenizer ignores punctuation, so a term without a letter or
        # digit would match nothing and, ANDed in, hide every result.
        terms = [term for term in terms if any(ch.isalnum() for ch in term)]
        if not terms:
            return f"WHERE {title}", [like_pattern(query)]
        matches = " UNION ".join(
            f"SELECT m.conversation_id FROM {table} f JOIN messages m ON m.id = f.rowid "
            f"WHERE {table} MATCH ?"
            for table in SEARCH_TABLES
        )
        return (
            f"WHERE {title} OR c.id IN ({matches})",
            [like_pattern(query), *(fts_query(terms) for _ in SEARCH_TABLES)],
        )
    matches = " UNION ".join(
        "SELECT m.conversation_id FROM messages m WHERE "
        + " AND ".join(f"m.{column} LIKE ? ESCAPE '\\'" for _ in terms)
        for column in ("content", "tool_text")
    )
    return (
        f"WHERE {title} OR c.id IN ({matches})",
        [like_pattern(query), *(like_pattern(t) for t in terms * 2)],
    )


def like_pattern(text: str) -> str:
    """`%text%` for LIKE ... ESCAPE '\\', with the user's % and _ taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def fts_query(terms: list[str]) -> str:
    """Each word as a quoted prefix term (so FTS syntax in the query is just text)."""
    return " ".join('"' + term.replace('"', '""') + '"*' for term in terms)
