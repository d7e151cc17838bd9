"""Files written whole: the old file or the new one, never half of one, and no
temporary file left behind whatever fails."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.whole_files import replace_whole, write_new


def test_replace_whole_writes_text_bytes_and_pieces(tmp_path: Path) -> None:
    path = tmp_path / "file"
    assert replace_whole(path, "café\n") == len("café\n".encode())
    assert path.read_text(encoding="utf-8") == "café\n"
    assert replace_whole(path, b"\x00\x01", durable=False) == 2
    assert path.read_bytes() == b"\x00\x01"
    assert replace_whole(path, [b"ab", bytearray(b"cd"), memoryview(b"ef")]) == 6
    assert path.read_bytes() == b"abcdef"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_write_that_fails_midway_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")

    def pieces() -> Iterator[bytes]:
        yield b"new, first half"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        replace_whole(path, pieces())
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_rename_that_fails_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text("old")

    def fail(*args: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(PermissionError):
        replace_whole(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]


def test_a_new_file_is_private_and_keep_mode_keeps_the_old_permissions(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    replace_whole(fresh, "x")
    assert fresh.stat().st_mode & 0o777 == 0o600
    shared = tmp_path / "shared"
    shared.write_text("")
    shared.chmod(0o644)
    replace_whole(shared, "y", keep_mode=True)
    assert shared.stat().st_mode & 0o777 == 0o644
    replace_whole(tmp_path / "absent", "z", keep_mode=True)  # nothing to keep: fine


def test_write_new_takes_the_first_free_name_and_overwrites_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("the user's own")
    names = ["a.md", "a-2.md", "a-3.md"]
    assert write_new(tmp_path, names, "first") == tmp_path / "a-2.md"
    assert write_new(tmp_path, names, "second") == tmp_path / "a-3.md"
    with pytest.raises(FileExistsError):
        write_new(tmp_path, names, "third")
    assert (tmp_path / "a.md").read_text() == "the user's own"
    assert (tmp_path / "a-2.md").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_a_missing_folder_is_an_os_error_with_nothing_left(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        replace_whole(tmp_path / "no" / "file", "x")
    with pytest.raises(FileNotFoundError):
        write_new(tmp_path / "no", ["file"], "x")
    assert list(tmp_path.iterdir()) == []
