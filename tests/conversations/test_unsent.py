"""The message being written when kvchat quit, kept for the next start
(chat.conversations.unsent); the app's side is in tests/ui/app/test_typing.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chat.conversations.unsent import keep_unsent, take_unsent


def test_each_quit_keeps_its_own_and_the_newest_comes_back_first(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    keep_unsent("from the first window", folder)
    keep_unsent("from the second window\nwith two lines é", folder)
    assert take_unsent(folder) == "from the second window\nwith two lines é"
    assert take_unsent(folder) == "from the first window"
    assert take_unsent(folder) is None
    assert list(folder.iterdir()) == []


def test_no_folder_means_nothing_kept(tmp_path: Path) -> None:
    assert take_unsent(tmp_path / "missing") is None


def test_what_cannot_be_read_back_is_left_and_the_next_one_taken(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    keep_unsent("readable", folder)
    os.mkfifo(folder / "unsent-99999999999999999999.txt")  # newest, and no file
    (folder / "unsent-notanumber.txt").write_text("not one of kvchat's")
    (folder / "other.txt").write_text("not one of kvchat's")
    assert take_unsent(folder) == "readable"
    assert sorted(path.name for path in folder.iterdir()) == [
        "other.txt",
        "unsent-99999999999999999999.txt",
        "unsent-notanumber.txt",
    ]


def test_a_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    folder = tmp_path / "unsent"
    with pytest.raises(UnicodeEncodeError):
        keep_unsent("\ud800 cannot be encoded", folder)
    assert list(folder.iterdir()) == []
