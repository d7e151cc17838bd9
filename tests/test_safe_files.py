"""Files from outside are read without freezing or leaving their folder
(chat.safe_files), checked against the real things: FIFOs, devices, sockets,
link loops, huge files, names that climb out."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from chat.safe_files import (
    UnsafeFileError,
    inside,
    is_plain_name,
    read_bytes,
    read_text,
    walk_files,
)


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text("x = 1\n", encoding="utf-8")
    assert read_text(path, 100) == "x = 1\n"


def test_a_fifo_is_refused_at_once_with_no_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(UnsafeFileError, match=r"is a pipe \(FIFO\): only regular files"):
        read_bytes(fifo, 1000, what="config file")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/stdin", "/dev/null"])
def test_a_link_to_a_device_is_refused(tmp_path: Path, device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this machine")
    link = tmp_path / "theme.toml"
    link.symlink_to(device)
    with pytest.raises(UnsafeFileError, match="theme"):
        read_bytes(link, 1000, what="theme")


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        with pytest.raises(UnsafeFileError, match=r"cannot be opened|socket"):
            read_bytes(path, 1000)
    finally:
        server.close()


def test_a_link_loop_is_named(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UnsafeFileError, match="links form a loop"):
        read_bytes(tmp_path / "a", 1000)


def test_a_file_over_the_limit_is_refused_not_cut(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_bytes(b"x" * 2049)
    with pytest.raises(UnsafeFileError, match="larger than 2 KiB"):
        read_bytes(path, 2048)
    assert read_bytes(path, 4096) == b"x" * 2049


def test_a_file_growing_while_read_stops_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "growing"
    path.write_bytes(b"")
    stop = threading.Event()

    def grow() -> None:
        with path.open("ab") as out:
            while not stop.is_set():
                out.write(b"y" * 65536)
                out.flush()

    writer = threading.Thread(target=grow, daemon=True)
    writer.start()
    try:
        time.sleep(0.05)
        with pytest.raises(UnsafeFileError, match="larger than"):
            read_bytes(path, 1 << 20)
    finally:
        stop.set()
        writer.join()


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"name = '\xe9'")
    with pytest.raises(UnsafeFileError, match="not UTF-8"):
        read_text(path, 100)


def test_an_escape_in_a_file_name_is_not_in_the_message(tmp_path: Path) -> None:
    fifo = tmp_path / "evil\x1b]0;title\x07.toml"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError) as raised:
        read_bytes(fifo, 10)
    assert "\x1b" not in str(raised.value) and "\x07" not in str(raised.value)


@pytest.mark.parametrize(
    "name", ["../outside", "/etc/passwd", "a/../../b", "sub/../../x", "..", "a\x00b", ""]
)
def test_a_name_that_leaves_its_folder_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafeFileError):
        inside(tmp_path, name)


def test_a_link_that_points_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to("/etc")
    with pytest.raises(UnsafeFileError, match="leads outside"):
        inside(tmp_path, "out", "passwd")
    assert inside(tmp_path, "sub", "file.gguf") == tmp_path.resolve() / "sub" / "file.gguf"


def test_plain_names() -> None:
    assert is_plain_name("model.gguf")
    assert not any(is_plain_name(n) for n in ("", ".", "..", "a/b", "a\\b", "a\x00"))


def test_a_walk_through_links_to_itself_ends(tmp_path: Path) -> None:
    (tmp_path / "one.gguf").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "two.gguf").write_bytes(b"x")
    (tmp_path / "loop1").symlink_to(".")
    (tmp_path / "loop2").symlink_to(".")
    (tmp_path / "sub" / "up").symlink_to("..")
    (tmp_path / "fifo").touch()
    started = time.monotonic()
    found = list(walk_files(tmp_path))
    assert time.monotonic() - started < 2
    assert sorted(p.name for p in found) == ["fifo", "one.gguf", "two.gguf"]


def test_a_walk_is_bounded_in_entries_and_depth(tmp_path: Path) -> None:
    for index in range(50):
        (tmp_path / f"{index:02}.gguf").write_bytes(b"")
    assert len(list(walk_files(tmp_path, max_entries=10))) == 10
    deep = tmp_path / "d"
    for _ in range(5):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "deep.gguf").write_bytes(b"")
    assert all(p.name != "deep.gguf" for p in walk_files(tmp_path, max_depth=3))
