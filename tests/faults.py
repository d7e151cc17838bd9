"""Real filesystem faults for the reliability tests: a full disk, a read-only
folder, a folder that cannot be created.

A full or read-only disk is a small tmpfs when this machine lets the tests
mount one (root with CAP_SYS_ADMIN, as in CI here); otherwise the nearest real
fault stands in: a file where the folder should be (creating anything inside it
fails with ENOTDIR, as it does under a folder that cannot be created).
`Fault.real` says which one a test got, for the tests that need a true
"disk full" (ENOSPC) and must not pass on a stand-in.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Room for SQLite's write-ahead log, which grows to ~4 MB before it is
# checkpointed: a smaller disk would be full from ordinary use.
SIZE_KIB = 8192


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def mount_tmpfs(path: Path, size_kib: int) -> bool:
    """Mount a tmpfs of `size_kib` on `path` (made if missing); False if not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if not _can_mount():
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, mode: str) -> None:
    """`mode` "ro" or "rw"."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True)


def fill(folder: Path) -> None:
    """Write until the filesystem holding `folder` is full (ENOSPC)."""
    filler = folder / ".filler"
    with contextlib.suppress(OSError), filler.open("ab") as out:
        while True:
            out.write(b"\0" * 4096)
            out.flush()
            os.fsync(out.fileno())


def make_room(folder: Path) -> None:
    """Undo `fill`."""
    (folder / ".filler").unlink(missing_ok=True)


@dataclass
class Fault:
    """A folder with something wrong; `heal()` makes it work again."""

    folder: Path
    real: bool
    """True: the real fault (a full or read-only tmpfs); False: a stand-in."""
    kind: str

    def heal(self) -> None:
        if self.kind == "full":
            make_room(self.folder)
        elif self.kind == "read-only":
            remount(self.folder, "rw")
        elif self.kind == "uncreatable" and self.folder.parent.is_file():
            self.folder.parent.unlink()

    def break_again(self) -> None:
        if self.kind == "full":
            fill(self.folder)
        elif self.kind == "read-only":
            remount(self.folder, "ro")


@contextlib.contextmanager
def _mounted(path: Path, size_kib: int) -> Iterator[bool]:
    mounted = mount_tmpfs(path, size_kib)
    try:
        yield mounted
    finally:
        if mounted:
            unmount(path)


def _stand_in(tmp_path: Path, kind: str) -> Fault:
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where a folder should be\n")
    return Fault(blocker / "folder", real=False, kind="uncreatable")


@pytest.fixture
def full_folder(tmp_path: Path) -> Iterator[Fault]:
    """A folder on a small tmpfs that is full; `heal()` frees space."""
    path = tmp_path / "full"
    with _mounted(path, SIZE_KIB) as mounted:
        if not mounted:
            yield _stand_in(tmp_path, "full")
            return
        fill(path)
        yield Fault(path, real=True, kind="full")


@pytest.fixture
def small_folder(tmp_path: Path) -> Iterator[Fault]:
    """A folder on a small (8 MiB) tmpfs with room left: a test fills it with
    `fault.break_again()` at the moment it wants the disk to be full."""
    path = tmp_path / "small"
    with _mounted(path, SIZE_KIB) as mounted:
        if not mounted:
            yield _stand_in(tmp_path, "full")
            return
        yield Fault(path, real=True, kind="full")


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Fault]:
    """A folder on a read-only tmpfs; `heal()` makes it writable."""
    path = tmp_path / "read-only"
    with _mounted(path, SIZE_KIB) as mounted:
        if not mounted:
            yield _stand_in(tmp_path, "read-only")
            return
        remount(path, "ro")
        yield Fault(path, real=True, kind="read-only")


@pytest.fixture
def uncreatable_folder(tmp_path: Path) -> Fault:
    """A folder that cannot be created: its parent is a file. `heal()` removes the file."""
    return _stand_in(tmp_path, "uncreatable")
