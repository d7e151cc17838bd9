"""The tools a conversation turned off are kept with it (schema 10): saved and
read back, changed by the saver, kept by forks, checked when read, and added
to older databases as "all on"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver, ConversationSettings
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.conversations.tool_switches import ToolSwitches, switches_from_json, switches_json
from tests.conversations.conftest import insert_a_question, old_database

OFF = ToolSwitches(
    servers=frozenset({"git"}), tools=frozenset({("notes", "delete"), ("time", "convert")})
)


def test_switches_round_trip_through_their_stored_form() -> None:
    assert switches_json(ToolSwitches()) == ""
    for switches in (
        OFF,
        ToolSwitches(all_off=True),
        ToolSwitches(all_off=True, servers=OFF.servers),
    ):
        assert switches_from_json(switches_json(switches)) == switches
    assert switches_from_json("") == ToolSwitches() == switches_from_json(None)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"version": 2, "all_off": true, "servers": [], "tools": []}',
        '{"version": 1, "all_off": "yes", "servers": [], "tools": []}',
        '{"version": 1, "all_off": false, "servers": [1], "tools": []}',
        '{"version": 1, "all_off": false, "servers": [], "tools": [["only one"]]}',
        '{"version": 1, "all_off": false, "servers": [], "tools": {"a": "b"}}',
        "[" * 100_000,
    ],
)
def test_a_stored_value_that_is_not_kvchats_reads_as_all_on(text: str) -> None:
    assert switches_from_json(text) == ToolSwitches()


def test_the_switches_are_saved_and_read_back(store: Store, db_path: Path) -> None:
    conv = Conversation(messages=[Message("user", "Hi")], tool_switches=OFF)
    conv_id = store.create_conversation(conv)
    assert store.get_conversation(conv_id).tool_switches == OFF
    # Settings written without switches leave them; with some, they change.
    store.update_conversation_settings(conv_id, "", {}, "", "")
    assert store.get_conversation(conv_id).tool_switches == OFF
    store.update_conversation_settings(conv_id, "", {}, "", "", tool_switches=ToolSwitches())
    assert store.get_conversation(conv_id).tool_switches == ToolSwitches()
    # A damaged value: the conversation still opens, with all on.
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE conversations SET tools_off = '{' WHERE id = ?", (conv_id,))
    loaded = store.get_conversation(conv_id)
    assert (loaded.tool_switches, loaded.messages[0].content) == (ToolSwitches(), "Hi")


def test_a_fork_keeps_the_switches() -> None:
    conv = Conversation(messages=[Message("user", "Hi")], tool_switches=OFF)
    assert conv.fork_at(conv.messages[0]).tool_switches == OFF


def test_the_saver_writes_switches_set_before_the_first_message_and_later(store: Store) -> None:
    saver = ConversationSaver(lambda text: pytest.fail(text))
    saver.attach(store)
    conv = Conversation(messages=[Message("user", "Hi")])
    settings = ConversationSettings("", {}, "/m.gguf", "m", tool_switches=OFF)
    assert saver.save_messages(conv, settings)
    assert conv.id is not None and store.get_conversation(conv.id).tool_switches == OFF
    all_off = ToolSwitches(all_off=True)
    assert saver.save_messages(
        conv, ConversationSettings("", {}, "/m.gguf", "m", tool_switches=all_off)
    )
    assert store.get_conversation(conv.id).tool_switches == all_off


def test_migrating_a_schema_9_database_keeps_every_row_and_turns_all_on(db_path: Path) -> None:
    conn = old_database(db_path, 9)
    insert_a_question(conn)
    conn.execute(
        "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, content, "
        "created, tool_steps, tool_text) VALUES (2, 1, 1, 1, 1, 'assistant', 'Four.', 3.0, "
        "NULL, '')"
    )
    before = conn.execute("SELECT * FROM conversations").fetchall()
    messages_before = conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
    conn.close()
    with Store(db_path) as store:
        conv = store.get_conversation(1)
        assert conv.tool_switches == ToolSwitches()
        assert [m.content for m in conv.messages] == ["What is 2+2?", "Four."]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 10
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        after = conn.execute("SELECT * FROM conversations").fetchall()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(conversations)")]
        assert conn.execute("SELECT * FROM messages ORDER BY id").fetchall() == messages_before
    # Every old value is where it was; the new column follows, empty (all on).
    width = len(before[0])
    assert [row[:width] for row in after] == before
    assert (columns[width], after[0][width]) == ("tools_off", "")
    with Store(db_path) as store:
        store.update_conversation_settings(1, "", {}, "", "", tool_switches=OFF)
        assert store.get_conversation(1).tool_switches == OFF
