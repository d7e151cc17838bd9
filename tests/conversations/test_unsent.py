"""The message being written when kvchat quit, kept until its conversation is
open again (chat.conversations.unsent); the app's side is in
tests/ui/app/test_typing.py and tests/ui/app/test_unsent_messages.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chat import paths
from chat.conversations.unsent import keep_unsent, kept_messages, take_at_start, take_unsent


def anywhere(conversation: int | None) -> bool:
    return True


def test_each_quit_keeps_its_own_and_the_newest_comes_back_first(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    keep_unsent("from the first window", None, folder)
    keep_unsent("from the second window\nwith two lines é", None, folder)
    assert take_unsent(anywhere, folder) == "from the second window\nwith two lines é"
    assert take_unsent(anywhere, folder) == "from the first window"
    assert take_unsent(anywhere, folder) is None
    assert list(folder.iterdir()) == []


def test_no_folder_means_nothing_kept(tmp_path: Path) -> None:
    assert take_unsent(anywhere, tmp_path / "missing") is None


def test_what_cannot_be_read_back_is_left_and_the_next_one_taken(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    keep_unsent("readable", 3, folder)
    os.mkfifo(folder / "unsent-99999999999999999999.txt")  # newest, and no file
    (folder / "unsent-notanumber.txt").write_text("not one of kvchat's")
    (folder / "other.txt").write_text("not one of kvchat's")
    assert take_unsent(anywhere, folder) == "readable"
    assert sorted(path.name for path in folder.iterdir()) == [
        "other.txt",
        "unsent-99999999999999999999.txt",
        "unsent-notanumber.txt",
    ]


def test_a_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    with pytest.raises(UnicodeEncodeError):
        keep_unsent("\ud800 cannot be encoded", None, folder)
    assert list(folder.iterdir()) == []


def test_a_message_comes_back_only_where_it_was_written(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    keep_unsent("in four", 4, folder)
    keep_unsent("in one", 1, folder)
    keep_unsent("in a new conversation", None, folder)
    assert take_unsent(lambda conversation: conversation == 4, folder) == "in four"
    assert take_unsent(lambda conversation: conversation == 4, folder) is None
    assert take_unsent(lambda conversation: conversation is None, folder) == "in a new conversation"
    assert [message.conversation_id for message in kept_messages(folder)] == [1]


def test_at_a_start_messages_of_other_saved_conversations_wait_for_them() -> None:
    keep_unsent("in four", 4)
    keep_unsent("in one, now deleted", 1)
    keep_unsent("in the one opened", 7)
    asked: list[set[int]] = []

    def titles(conversations: set[int]) -> dict[int, str]:
        asked.append(conversations)
        return {
            number: title
            for number, title in {4: "Four", 7: "Seven"}.items()
            if number in conversations
        }

    # Opened 7: its message comes back; 1 is no longer saved, so its message
    # comes back too (the newer of the two first); 4's waits.
    assert take_at_start(7, titles) == ("in the one opened", ["Four"])
    assert asked == [{1, 4}]
    assert take_at_start(7, titles) == ("in one, now deleted", ["Four"])
    assert take_at_start(7, titles) == (None, ["Four"])
    assert take_at_start(4, titles) == ("in four", [])
    assert list(paths.unsent_dir().iterdir()) == []


def test_without_a_database_every_message_comes_back_at_the_next_start() -> None:
    keep_unsent("in four", 4)
    assert take_at_start(None, None) == ("in four", [])
