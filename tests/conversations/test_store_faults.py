"""The store and the saver on a disk that fills up (a real full tmpfs): a write
that fails leaves nothing half-done, is reported once with what happened, and
everything is written once there is room again."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver, ConversationSettings
from chat.conversations.store import CorruptDatabaseError, Store
from chat.errors import StoreError
from chat.settings.schema import SamplingSettings
from tests.faults import Fault, remount

SETTINGS = ConversationSettings("", asdict(SamplingSettings()), "/m/a.gguf", "a")


@pytest.fixture
def real_disk(small_folder: Fault) -> Fault:
    if not small_folder.real:
        pytest.fail("this machine cannot mount a small tmpfs (root is needed)")
    return small_folder


def test_a_failed_write_leaves_no_id_and_the_next_write_works(real_disk: Fault) -> None:
    with Store(real_disk.folder / "c.db") as store:
        conversation = Conversation(messages=[Message("user", "kept")])
        store.create_conversation(conversation)
        real_disk.break_again()
        late = Message("user", "x" * 20_000, parent=conversation.messages[-1])
        with pytest.raises(StoreError, match="is full") as failure:
            store.append_turn(conversation, late)
        assert failure.value.brief == f"the disk holding {real_disk.folder} is full"
        # Not committed, so not saved: no id that points nowhere.
        assert late.id is None
        new = Conversation(messages=[Message("user", "y" * 20_000)])
        with pytest.raises(StoreError):
            store.create_conversation(new)
        assert new.id is None and new.messages[0].id is None

        real_disk.heal()
        store.append_turn(conversation, late)  # no transaction left open
        assert conversation.id is not None
        saved = store.get_conversation(conversation.id)
        assert [m.content for m in saved.messages] == ["kept", "x" * 20_000]


def test_the_saver_says_it_once_and_catches_up(real_disk: Fault) -> None:
    reports: list[str] = []
    marks: list[str | None] = []
    saver = ConversationSaver(reports.append, marks.append)
    with Store(real_disk.folder / "c.db") as store:
        saver.attach(store)
        conversation = Conversation(
            messages=[Message("user", "first"), Message("assistant", "taken back")]
        )
        assert saver.save_messages(conversation, SETTINGS)
        real_disk.break_again()
        taken_back = conversation.messages[-1]
        conversation.remove(taken_back)
        saver.discard(conversation, taken_back)
        for n in range(3):
            conversation.append(Message("user", f"{n}" * 20_000))
            assert not saver.save_messages(conversation, SETTINGS)
        assert len(reports) == 1 and "is full" in reports[0]
        assert "no longer" not in reports[0]
        assert saver.failing and marks == [f"the disk holding {real_disk.folder} is full"]

        saver.retry(conversation, SETTINGS)  # still full: nothing changes, nothing said
        assert saver.failing and len(reports) == 1

        real_disk.heal()
        saver.retry(conversation, SETTINGS)
        assert not saver.failing and marks[-1] is None
        assert reports[-1].startswith("Saving again")
        assert conversation.id is not None
        saved = store.get_conversation(conversation.id)
        assert [m.content[:1] for m in saved.messages] == ["f", "0", "1", "2"]
        assert len(saved.tree) == 4


def test_a_tree_made_while_the_disk_is_full_is_saved_whole_after(real_disk: Fault) -> None:
    """Branches made while nothing could be written (an edited message, a reply
    beside another one, a switch back) are all saved once there is room, each
    message after its parent, and the branch shown is the one on screen."""
    reports: list[str] = []
    saver = ConversationSaver(reports.append)
    with Store(real_disk.folder / "c.db") as store:
        saver.attach(store)
        question = Message("user", "q")
        conversation = Conversation(messages=[question, Message("assistant", "a")])
        assert saver.save_messages(conversation, SETTINGS)
        real_disk.break_again()
        # The reply regenerated: a sibling of "a", streamed while writes fail.
        conversation.messages.pop()
        regenerated = Message("assistant", "", parent=question)
        saver.start_reply(conversation, SETTINGS, regenerated)
        saver.save_progress("b" * 20_000)
        saver.finish_reply("b" * 20_000, None, token_ids=[5, 6])
        regenerated.content, regenerated.token_ids = "b" * 20_000, [5, 6]
        conversation.append(regenerated)
        conversation.append(Message("user", "c" * 20_000))
        assert not saver.save_messages(conversation, SETTINGS)
        # The question edited: a new first message with its own reply.
        edited = Message("user", "q, edited")
        conversation.add_sibling(question, edited)
        conversation.append(Message("assistant", "d" * 20_000))
        assert not saver.save_messages(conversation, SETTINGS)
        # Back to the regenerated reply's branch: that is what is on screen.
        conversation.show(regenerated)
        saver.shown_branch_changed(conversation)
        assert saver.failing and len(reports) == 1

        real_disk.heal()
        saver.retry(conversation, SETTINGS)
        assert not saver.failing
        assert all(m.id is not None for m in conversation.tree)
        assert conversation.id is not None
        saved = store.get_conversation(conversation.id)
    assert [m.content[:1] for m in saved.messages] == ["q", "b", "c"]
    assert saved.messages[1].token_ids == [5, 6]
    assert [m.content for m in saved.tree.siblings(saved.messages[0])] == ["q", "q, edited"]
    assert [m.content[:1] for m in saved.tree.siblings(saved.messages[1])] == ["a", "b"]
    assert [[m.content[:1] for m in saved.tree.path_to(leaf)] for leaf in saved.tree.leaves()] == [
        ["q", "a"],
        ["q", "b", "c"],
        ["q", "d"],
    ]


@pytest.mark.parametrize("fault_kind", ["full", "read-only"])
def test_a_sound_database_in_a_folder_that_fails_is_not_called_damaged(
    fault_kind: str, small_folder: Fault
) -> None:
    """SQLite needs its -wal and -shm files even to read: a full or read-only folder
    is named as the cause, never the database (which kvchat would offer to move aside)."""
    database = small_folder.folder / "c.db"
    with Store(database) as store:
        store.create_conversation(Conversation(messages=[Message("user", "kept")]))
    for sidecar in ("-wal", "-shm"):
        Path(f"{database}{sidecar}").unlink(missing_ok=True)
    if fault_kind == "full":
        small_folder.break_again()
    else:
        remount(small_folder.folder, "ro")
    try:
        with pytest.raises(StoreError) as failure:
            Store(database)
        assert not isinstance(failure.value, CorruptDatabaseError)
        expected = "is full" if fault_kind == "full" else "is on a read-only disk"
        assert expected in str(failure.value) and "untouched" in str(failure.value)
    finally:
        if fault_kind == "read-only":
            remount(small_folder.folder, "rw")
    small_folder.heal()
    with Store(database) as store:
        assert store.count_conversations() == 1
