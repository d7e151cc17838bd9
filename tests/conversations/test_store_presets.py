"""The preset a conversation was given is saved with it (schema 6), read back,
changed, kept by forks, and added to older databases as "none"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSettings
from chat.conversations.store import SCHEMA_VERSION, Store
from tests.conversations.conftest import old_database, saver_for


def coder_chat() -> Conversation:
    return Conversation(
        system_prompt="You are an expert programmer.",
        title="Sorting",
        preset="coder",
        messages=[Message("user", "Sort a list?"), Message("assistant", "sorted(xs)")],
    )


def test_the_preset_is_saved_and_read_back(store: Store) -> None:
    conv_id = store.create_conversation(coder_chat(), {"temperature": 0.2})
    loaded = store.get_conversation(conv_id)
    assert loaded.preset == "coder"
    assert loaded.system_prompt == "You are an expert programmer."
    assert store.get_sampling(conv_id) == {"temperature": 0.2}
    # Settings written without a preset leave it as it is; with one, it changes.
    store.update_conversation_settings(conv_id, "Other.", {"temperature": 0.9}, "", "")
    assert store.get_conversation(conv_id).preset == "coder"
    store.update_conversation_settings(conv_id, "Other.", {}, "", "", preset="creative")
    assert store.get_conversation(conv_id).preset == "creative"
    assert store.create_conversation(Conversation(messages=[Message("user", "Hi")])) != conv_id
    assert store.get_conversation(conv_id + 1).preset == ""


def test_a_fork_keeps_the_preset() -> None:
    conv = coder_chat()
    fork = conv.fork_at(conv.messages[0])
    assert (fork.preset, fork.system_prompt) == ("coder", conv.system_prompt)


def test_the_saver_records_a_preset_chosen_later(store: Store) -> None:
    saver = saver_for(store)
    conv = Conversation(system_prompt="Be kind.", messages=[Message("user", "Hi")])
    settings = ConversationSettings("Be kind.", {"temperature": 0.8}, "/m.gguf", "m")
    assert saver.save_messages(conv, settings)
    assert conv.id is not None and store.get_conversation(conv.id).preset == ""
    # What ChatSession.use_preset does: the conversation's prompt, sampling and preset change.
    conv.system_prompt, conv.preset = "You are an expert programmer.", "coder"
    chosen = ConversationSettings(
        conv.system_prompt, {"temperature": 0.2}, "/m.gguf", "m", preset="coder"
    )
    assert saver.save_messages(conv, chosen)
    loaded = store.get_conversation(conv.id)
    assert (loaded.preset, loaded.system_prompt) == ("coder", "You are an expert programmer.")
    assert store.get_sampling(conv.id) == {"temperature": 0.2}


def _schema_5_database(path: Path) -> None:
    conn = old_database(path, 5)
    conn.execute(
        "INSERT INTO conversations (id, title, created, updated, model_path, model_name, "
        "system_prompt, sampling, backend, server_url) VALUES "
        "(1, 'Soups', 1.0, 5.0, '/m/demo.gguf', 'demo', 'Be kind.', '{\"seed\": 3}', "
        "'local', '')"
    )
    conn.execute(
        "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, "
        "content, created) VALUES (1, 1, 0, NULL, 0, 'user', 'Which soup?', 1.5)"
    )
    conn.close()


def test_migrating_a_schema_5_database_gives_every_conversation_no_preset(
    db_path: Path,
) -> None:
    _schema_5_database(db_path)
    with sqlite3.connect(db_path) as conn:
        before = conn.execute("SELECT * FROM conversations").fetchall()
    with Store(db_path) as opened:
        conv = opened.get_conversation(1)
        assert conv.preset == ""
        assert (conv.system_prompt, [m.content for m in conv.messages]) == (
            "Be kind.",
            ["Which soup?"],
        )
        assert opened.get_sampling(1) == {"seed": 3}
    assert SCHEMA_VERSION >= 6
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        after = conn.execute("SELECT * FROM conversations").fetchall()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(conversations)")]
    # Every old value is where it was; the preset column follows, empty.
    width = len(before[0])
    assert [row[:width] for row in after] == before
    assert (columns[width], after[0][width]) == ("preset", "")
    with Store(db_path) as opened:
        opened.update_conversation_settings(1, "Be kind.", {"seed": 3}, "", "", preset="concise")
        assert opened.get_conversation(1).preset == "concise"


def test_exports_name_the_preset_and_an_import_keeps_it(store: Store) -> None:
    from chat.conversations.transcript import parse_import, to_json, to_markdown

    conv_id = store.create_conversation(coder_chat(), {"temperature": 0.2})
    conv = store.get_conversation(conv_id)
    assert "- **Preset:** coder" in to_markdown(conv, {"temperature": 0.2})
    imported, sampling = parse_import(to_json(conv, {"temperature": 0.2}))
    assert (imported.preset, sampling) == ("coder", {"temperature": 0.2})
    assert store.get_conversation(store.import_conversation(imported, sampling)).preset == "coder"
    # A conversation without one says nothing about presets.
    plain = Conversation(messages=[Message("user", "Hi")])
    assert "Preset" not in to_markdown(plain)
