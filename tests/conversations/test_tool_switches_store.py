"""The tools a conversation turned off are kept with it (schema 10): saved and
read back, changed by the saver, kept by forks, checked when read, added to
older databases as "all on", and carried by a JSON export and its import."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSettings
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.conversations.tool_switches import ToolSwitches, switches_from_json, switches_json
from chat.conversations.transcript import parse_import, to_json
from tests.conversations.conftest import insert_a_question, old_database, saver_for

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
    saver = saver_for(store)
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
        messages_after = conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
    # Every old value is where it was (later schemas add columns to the
    # messages); the new column follows, empty (all on).
    old_width = len(messages_before[0])
    assert [row[:old_width] for row in messages_after] == messages_before
    width = len(before[0])
    assert [row[:width] for row in after] == before
    assert (columns[width], after[0][width]) == ("tools_off", "")
    with Store(db_path) as store:
        store.update_conversation_settings(1, "", {}, "", "", tool_switches=OFF)
        assert store.get_conversation(1).tool_switches == OFF


# --- JSON export and import ---------------------------------------------------------


def exported(switches: ToolSwitches) -> dict[str, Any]:
    conv = Conversation(
        title="Tools", messages=[Message("user", "Hi", created=1.0)], tool_switches=switches
    )
    data: dict[str, Any] = json.loads(to_json(conv, {}))
    return data


@pytest.mark.parametrize("switches", [OFF, ToolSwitches(all_off=True, servers=OFF.servers)])
def test_a_json_export_carries_the_switches_and_imports_them_back(
    switches: ToolSwitches, store: Store
) -> None:
    text = json.dumps(exported(switches))
    conv, _ = parse_import(text)
    assert conv.tool_switches == switches
    conv_id = store.import_conversation(conv, {})
    loaded = store.get_conversation(conv_id)
    assert loaded.tool_switches == switches
    assert (
        json.loads(to_json(loaded, {}))["kvchat"]["tools_off"]
        == exported(switches)["kvchat"]["tools_off"]
    )


def test_an_export_with_every_tool_on_has_no_switches_and_imports_all_on() -> None:
    data = exported(ToolSwitches())
    assert "tools_off" not in data["kvchat"]
    assert parse_import(json.dumps(data))[0].tool_switches == ToolSwitches()


@pytest.mark.parametrize(
    "value",
    [
        None,
        "git",
        [["git", "log"]],
        {"version": 2, "all_off": True, "servers": [], "tools": []},
        {"version": 1, "all_off": "yes", "servers": [], "tools": []},
        {"version": 1, "all_off": False, "servers": ["git"], "tools": [["log"]]},
        {"version": 1, "all_off": False, "servers": [["git"]], "tools": []},
    ],
)
def test_switches_missing_or_damaged_in_a_file_import_as_all_on(value: object) -> None:
    data = exported(OFF)
    if value is None:
        del data["kvchat"]["tools_off"]  # an export from before the switches
    else:
        data["kvchat"]["tools_off"] = value
    conv, _ = parse_import(json.dumps(data))
    assert (conv.tool_switches, conv.messages[0].content) == (ToolSwitches(), "Hi")
