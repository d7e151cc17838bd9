"""Saving as it happens (without the UI), restoring sampling settings, and
export files that never overwrite."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

import chat.conversations.store as store_module
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.export import export_conversation, file_stem
from chat.conversations.saver import ConversationSaver, ConversationSettings, restore_sampling
from chat.conversations.store import Store
from chat.conversations.transcript import parse_import
from chat.errors import KvchatError
from chat.settings.schema import SamplingSettings

SETTINGS = ConversationSettings("Be brief.", asdict(SamplingSettings()), "/m/a.gguf", "a")
STATS = ReplyStats(10, 10, 3, 0.1, 50.0, "done", seed=7)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "c.db") as opened:
        yield opened


def saver_for(store: Store | None) -> tuple[ConversationSaver, list[str]]:
    reports: list[str] = []
    saver = ConversationSaver(reports.append)
    if store is not None:
        saver.attach(store)
    return saver, reports


def one_turn(saver: ConversationSaver, conv: Conversation, text: str, reply: str) -> Message:
    conv.messages.append(Message("user", text))
    saver.save_messages(conv, SETTINGS)
    answer = Message("assistant", "")
    saver.start_reply(conv, SETTINGS, answer)
    saver.save_progress(reply)
    saver.finish_reply(reply, STATS)
    answer.content, answer.stats = reply, STATS  # as the screen's view does
    conv.messages.append(answer)
    return answer


def test_a_turn_is_saved_with_title_settings_and_stats(store: Store) -> None:
    saver, reports = saver_for(store)
    conv = Conversation(system_prompt="Be brief.")
    one_turn(saver, conv, "What is a KV cache?\nsecond line", "A cache.")
    assert conv.id is not None and reports == []
    saved = store.get_conversation(conv.id)
    assert saved.title == "What is a KV cache?"
    assert (saved.model_path, saved.model_name, saved.system_prompt) == (
        "/m/a.gguf",
        "a",
        "Be brief.",
    )
    assert [(m.role, m.content) for m in saved.messages] == [
        ("user", "What is a KV cache?\nsecond line"),
        ("assistant", "A cache."),
    ]
    assert saved.messages[1].stats == STATS
    assert store.get_sampling(conv.id) == asdict(SamplingSettings())


def test_progress_is_written_only_when_the_text_changed(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    conv.messages.append(Message("user", "q"))
    saver.save_messages(conv, SETTINGS)
    reply = Message("assistant", "")
    saver.start_reply(conv, SETTINGS, reply)
    assert reply.id is not None  # the row exists from the start
    writes: list[str] = []
    store._conn.set_trace_callback(writes.append)
    saver.save_progress("")
    assert writes == []
    saver.save_progress("Hello")
    assert store.get_conversation(conv.id or 0).messages[-1].content == "Hello"
    writes.clear()
    saver.save_progress("Hello")
    assert writes == []


def test_settings_are_updated_when_they_change(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    one_turn(saver, conv, "q1", "a1")
    hotter = ConversationSettings("Be brief.", {**SETTINGS.sampling, "temperature": 0.1}, "/b", "b")
    conv.messages.append(Message("user", "q2"))
    saver.save_messages(conv, hotter)
    assert conv.id is not None
    assert store.get_sampling(conv.id)["temperature"] == 0.1
    assert store.get_conversation(conv.id).model_name == "b"


def test_a_failed_write_is_reported_and_retried_in_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver, reports = saver_for(store)
    conv = Conversation()
    one_turn(saver, conv, "q1", "a1")
    # Another program holds the write lock for longer than the busy timeout.
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.1)
    store._conn.execute("PRAGMA busy_timeout = 100")
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    conv.messages.append(Message("user", "q2"))
    saver.save_messages(conv, SETTINGS)
    assert len(reports) == 1 and "locked" in reports[0]
    assert conv.messages[-1].id is None
    blocker.execute("COMMIT")
    blocker.close()
    conv.messages.append(Message("assistant", "a2"))
    conv.messages.append(Message("user", "q3"))
    saver.save_messages(conv, SETTINGS)
    assert conv.id is not None
    assert [m.content for m in store.get_conversation(conv.id).messages] == [
        "q1",
        "a1",
        "q2",
        "a2",
        "q3",
    ]


def test_a_conversation_deleted_elsewhere_is_saved_again(store: Store) -> None:
    saver, reports = saver_for(store)
    conv = Conversation()
    one_turn(saver, conv, "q1", "a1")
    old_id = conv.id
    assert old_id is not None
    store.delete_conversation(old_id)
    conv.messages.append(Message("user", "q2"))
    saver.save_messages(conv, SETTINGS)
    assert "another kvchat window" in reports[0]
    saver.save_messages(conv, SETTINGS)
    assert conv.id is not None
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q1", "a1", "q2"]


def test_regenerated_reply_supersedes_and_discard_removes(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    first = one_turn(saver, conv, "q", "first")
    conv.messages.pop()
    second = Message("assistant", "")
    saver.start_reply(conv, SETTINGS, second, replaces=first.id)
    saver.finish_reply("second", STATS)
    conv.messages.append(second)
    assert conv.id is not None
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q", "second"]
    assert [m.content for m in store.get_superseded(conv.id)] == ["first"]
    # A reply that failed is taken back, and so is a message that did not fit.
    third = Message("assistant", "")
    saver.start_reply(conv, SETTINGS, third)
    saver.discard(conv, third)
    user = conv.messages.pop(0)
    saver.discard(conv, user)
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["second"]


def test_discarding_the_only_message_deletes_the_conversation(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    conv.messages.append(Message("user", "much too long"))
    saver.save_messages(conv, SETTINGS)
    saver.discard(conv, conv.messages.pop())
    assert conv.id is None and store.list_conversations() == []


def test_without_a_store_nothing_is_written_or_reported() -> None:
    saver, reports = saver_for(None)
    saver.stop_saving("the database is damaged")
    conv = Conversation()
    one_turn(saver, conv, "q", "a")
    assert conv.id is None and reports == [] and saver.not_saving == "the database is damaged"


def test_restore_sampling_keeps_valid_known_values() -> None:
    base = SamplingSettings(temperature=0.8, seed=None)
    saved = {"temperature": 0.2, "seed": 42, "top_k": 5000, "from_the_future": 1, "stop": ["x"]}
    restored = restore_sampling(saved, base)
    assert (restored.temperature, restored.seed, restored.stop) == (0.2, 42, ["x"])
    assert restored.top_k == base.top_k  # out of range: the default stays
    assert base.temperature == 0.8  # the defaults are not changed


# --- export files --------------------------------------------------------------------


def test_export_never_overwrites(tmp_path: Path) -> None:
    conv = Conversation(title="What's a KV cache? (part 2)", id=12)
    conv.messages = [Message("user", "hi"), Message("assistant", "hello")]
    assert file_stem(conv) == "what-s-a-kv-cache-part-2-12"
    first = export_conversation(conv, {}, folder=tmp_path)
    first.write_text("edited by the user")
    second = export_conversation(conv, {}, folder=tmp_path)
    assert first.name == "what-s-a-kv-cache-part-2-12.md"
    assert second.name == "what-s-a-kv-cache-part-2-12-2.md"
    assert first.read_text() == "edited by the user"
    assert "## Assistant" in second.read_text()
    as_json = export_conversation(conv, {"temperature": 0.5}, "json", folder=tmp_path)
    assert parse_import(as_json.read_text())[1] == {"temperature": 0.5}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [first.name, second.name, as_json.name]
    )  # no temporary files left behind


@pytest.mark.parametrize(
    ("title", "stem"),
    [
        ("Café au lait", "café-au-lait-7"),
        ("東京の天気は？", "東京の天気は-7"),
        ("Привет, мир", "привет-мир-7"),
        ("../../etc/passwd", "etc-passwd-7"),
        ("\x1b]0;x\x07", "0-x-7"),
        ("___", "conversation-7"),
    ],
)
def test_export_file_names_keep_letters_of_every_script(
    tmp_path: Path, title: str, stem: str
) -> None:
    conv = Conversation(title=title, id=7)
    conv.messages = [Message("user", "hi")]
    assert file_stem(conv) == stem
    written = export_conversation(conv, {}, folder=tmp_path)
    assert written.parent == tmp_path and written.name == f"{stem}.md"


def test_an_exported_file_shows_escape_sequences_instead_of_keeping_them(
    tmp_path: Path,
) -> None:
    # Ctrl+E writes this file; `cat` on it must not retitle the terminal.
    conv = Conversation(title="imported", id=8)
    conv.messages = [Message("user", "a\x1b]0;pwned\x07b\x9b2J")]
    text = export_conversation(conv, {}, folder=tmp_path).read_text()
    assert "a␛]0;pwned␇b<U+009B>2J" in text
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text


def test_export_to_an_unwritable_folder_says_so(tmp_path: Path) -> None:
    # A file stands where a folder of the path should be: no one can write
    # there, root included (a read-only folder would not stop root).
    (tmp_path / "notes").write_text("a file, not a folder")
    folder = tmp_path / "notes" / "exports"
    with pytest.raises(KvchatError) as error:
        export_conversation(Conversation(messages=[Message("user", "x")]), {}, folder=folder)
    assert str(error.value) == (
        f"kvchat cannot write the export: {folder} cannot be created: "
        f"{tmp_path / 'notes'} is a file, not a folder."
    )
    assert (tmp_path / "notes").read_text() == "a file, not a folder"
