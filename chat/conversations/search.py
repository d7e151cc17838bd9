"""Searching saved conversations: an FTS5 index over message text, kept in
step by triggers, and the filter the conversation list pages through (LIKE
where this Python's SQLite has no FTS5).
"""

from __future__ import annotations

import sqlite3
from typing import Any

FTS_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts "
    "USING fts5(content, content='messages', content_rowid='id')"
)
FTS_TRIGGERS = {
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
    conn.execute(FTS_TABLE)
    for name, sql in FTS_TRIGGERS.items():
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(sql)
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")


def search_clause(query: str, has_fts: bool) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of the conversations whose title
    or any message matches `query`: every word, as a word prefix with FTS5
    (punctuation is ignored), as a substring without. No clause for a blank query."""
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
        messages = (
            "SELECT m.conversation_id FROM messages_fts f JOIN messages m ON m.id = f.rowid "
            "WHERE messages_fts MATCH ?"
        )
        return (
            f"WHERE {title} OR c.id IN ({messages})",
            [like_pattern(query), fts_query(terms)],
        )
    words = " AND ".join("m.content LIKE ? ESCAPE '\\'" for _ in terms)
    messages = f"SELECT m.conversation_id FROM messages m WHERE {words}"
    return (
        f"WHERE {title} OR c.id IN ({messages})",
        [like_pattern(query), *(like_pattern(t) for t in terms)],
    )


def like_pattern(text: str) -> str:
    """`%text%` for LIKE ... ESCAPE '\\', with the user's % and _ taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def fts_query(terms: list[str]) -> str:
    """Each word as a quoted prefix term (so FTS syntax in the query is just text)."""
    return " ".join('"' + term.replace('"', '""') + '"*' for term in terms)
