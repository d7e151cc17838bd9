"""Saving as it happens (without the UI), restoring sampling settings, and
export files that never overwrite."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

import chat.conversations.database_file as database_file
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.saver import ConversationSaver, ConversationSettings, restore_sampling
from chat.conversations.store import Store
from chat.conversations.transcript import export_conversation, file_stem, parse_import
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
    conv.append(Message("user", text))
    saver.save_messages(conv, SETTINGS)
    return answer(saver, conv, reply)


def answer(saver: ConversationSaver, conv: Conversation, text: str) -> Message:
    """A reply to the last message shown, streamed and finished, as the session does."""
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress(text)
    saver.finish_reply(text, STATS, token_ids=[7, 8, 9])
    reply.content, reply.stats, reply.token_ids = text, STATS, [7, 8, 9]
    conv.append(reply)
    return reply


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
    conv.append(Message("user", "q"))
    saver.save_messages(conv, SETTINGS)
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    assert reply.id is not None  # the row exists from the start
    writes: list[str] = []
    store.trace(writes.append)
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
    conv.append(Message("user", "q2"))
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
    monkeypatch.setattr(database_file, "BUSY_TIMEOUT_S", 0.1)
    store.wait_when_locked(0.1)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    conv.append(Message("user", "q2"))
    saver.save_messages(conv, SETTINGS)
    assert len(reports) == 1 and "locked" in reports[0]
    assert conv.messages[-1].id is None
    blocker.execute("COMMIT")
    blocker.close()
    conv.append(Message("assistant", "a2"))
    conv.append(Message("user", "q3"))
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
    conv.append(Message("user", "q2"))
    saver.save_messages(conv, SETTINGS)
    assert "another kvchat window" in reports[0]
    saver.save_messages(conv, SETTINGS)
    assert conv.id is not None
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q1", "a1", "q2"]


def test_a_regenerated_reply_is_saved_beside_the_first_and_discard_removes(
    store: Store,
) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    first = one_turn(saver, conv, "q", "first")
    conv.messages.pop()  # regenerate: the new reply follows the question again
    second = answer(saver, conv, "second")
    assert conv.id is not None
    saved = store.get_conversation(conv.id)
    assert [m.content for m in saved.messages] == ["q", "second"]
    assert [m.content for m in saved.tree.siblings(saved.messages[1])] == ["first", "second"]
    assert saved.messages[1].token_ids == [7, 8, 9]
    # A reply that failed is taken back, and so is a message that did not fit.
    third = Message("assistant", "", parent=second)
    saver.start_reply(conv, SETTINGS, third)
    assert third.id is not None
    saver.discard(conv, third)
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q", "second"]
    conv.remove(second)
    saver.discard(conv, second)
    conv.remove(first)
    saver.discard(conv, first)
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q"]


def test_the_branch_shown_is_remembered_without_reordering_the_list(store: Store) -> None:
    saver, reports = saver_for(store)
    conv = Conversation()
    first = one_turn(saver, conv, "q", "first")
    one_turn(saver, conv, "more", "more answer")
    conv.messages = conv.messages[:1]  # regenerate the first reply
    answer(saver, conv, "second")
    assert conv.id is not None
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q", "second"]
    updated = store.get_conversation(conv.id).updated

    conv.show(first)
    saver.shown_branch_changed(conv)
    saved = store.get_conversation(conv.id)
    assert [m.content for m in saved.messages] == ["q", "first", "more", "more answer"]
    assert saved.updated == updated == conv.updated and reports == []
    # The next turn goes on from the branch shown, and the window sees no conflict.
    one_turn(saver, conv, "and then?", "then this")
    saved = store.get_conversation(conv.id)
    assert [m.content for m in saved.messages][-2:] == ["and then?", "then this"]
    assert len(saved.tree) == 7 and reports == [] and not saver.has_conflict


def test_an_edited_message_is_saved_beside_the_original(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    one_turn(saver, conv, "q1", "a1")
    question = one_turn(saver, conv, "q2", "a2").parent
    assert question is not None
    conv.add_sibling(question, Message("user", "q2, edited"))
    saver.save_messages(conv, SETTINGS)
    answer(saver, conv, "a2 for the edit")
    assert conv.id is not None
    saved = store.get_conversation(conv.id)
    assert [m.content for m in saved.messages] == ["q1", "a1", "q2, edited", "a2 for the edit"]
    assert [m.content for m in saved.tree.siblings(saved.messages[2])] == ["q2", "q2, edited"]


def test_a_branch_switch_that_cannot_be_written_is_written_later(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver, reports = saver_for(store)
    conv = Conversation()
    first = one_turn(saver, conv, "q", "first")
    conv.messages.pop()
    answer(saver, conv, "second")
    monkeypatch.setattr(database_file, "BUSY_TIMEOUT_S", 0.1)
    store.wait_when_locked(0.1)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    conv.show(first)
    saver.shown_branch_changed(conv)  # no exception: reported, kept for later
    assert saver.failing and len(reports) == 1 and "locked" in reports[0]
    blocker.execute("COMMIT")
    blocker.close()
    saver.retry(conv, SETTINGS)
    assert not saver.failing and reports[-1].startswith("Saving again")
    assert conv.id is not None
    assert [m.content for m in store.get_conversation(conv.id).messages] == ["q", "first"]


def test_a_fork_saves_every_branch_as_a_new_conversation(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    one_turn(saver, conv, "q", "first")
    conv.messages.pop()
    answer(saver, conv, "second")
    old_id = conv.id
    saver.fork(conv, SETTINGS)
    assert conv.id is not None and conv.id != old_id
    saved = store.get_conversation(conv.id)
    assert saved.title.endswith("(fork)") and len(saved.tree) == 3
    assert [m.content for m in saved.messages] == ["q", "second"]


def test_discarding_the_only_message_deletes_the_conversation(store: Store) -> None:
    saver, _ = saver_for(store)
    conv = Conversation()
    conv.append(Message("user", "much too long"))
    saver.save_messages(conv, SETTINGS)
    message = conv.messages[-1]
    conv.remove(message)
    saver.discard(conv, message)
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
    conv = Conversation(
        title="What's a KV cache? (part 2)",
        id=12,
        messages=[Message("user", "hi"), Message("assistant", "hello")],
    )
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
    conv = Conversation(title=title, id=7, messages=[Message("user", "hi")])
    assert file_stem(conv) == stem
    written = export_conversation(conv, {}, folder=tmp_path)
    assert written.parent == tmp_path and written.name == f"{stem}.md"


def test_an_exported_file_shows_escape_sequences_instead_of_keeping_them(
    tmp_path: Path,
) -> None:
    # Ctrl+E writes this file; `cat` on it must not retitle the terminal.
    conv = Conversation(
        title="imported", id=8, messages=[Message("user", "a\x1b]0;pwned\x07b\x9b2J")]
    )
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
