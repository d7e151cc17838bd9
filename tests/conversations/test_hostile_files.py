"""Attachments and imported conversations that are not plain files of a
sensible size: each is refused at once with one sentence, never waited on
(a FIFO with no writer, kvchat's own terminal as `/dev/stdin`) or read
without end (`/dev/zero`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat.conversations.attachments import AttachmentError, read_attachment
from chat.conversations.transcript import ImportFormatError, read_import_file
from chat.session.draft_attachments import DraftAttachments
from tests.hostile_files import HOSTILE, hostile_file, returns_within, stdin_is_regular

WHY = {
    "fifo": "it is a pipe (FIFO): only regular files are read",
    "dev-zero": "it is a device: only regular files are read",
    "dev-stdin": "only regular files are read",
    "socket": "it is a socket: only regular files are read",
    "link-loop": "its links form a loop",
}


def _skip_if_stdin_is_a_file(kind: str) -> None:
    if kind == "dev-stdin" and stdin_is_regular():
        pytest.skip("fd 0 is a regular file here: /dev/stdin is then a file like any other")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_attachment_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    _skip_if_stdin_is_a_file(kind)
    hostile_file(kind, tmp_path / "notes.txt")
    with pytest.raises(AttachmentError) as refused:
        returns_within(lambda: read_attachment("notes.txt", tmp_path))
    message = str(refused.value)
    assert message.startswith("notes.txt ")
    if kind == "huge":
        assert message == "notes.txt is too large to attach (16384.0 MB; the limit is 1.0 MB)."
    else:
        assert message.endswith(f"{WHY[kind]}.")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "socket", "huge"])
def test_a_hostile_file_named_in_the_draft_is_a_problem_not_a_freeze(
    tmp_path: Path, kind: str
) -> None:
    hostile_file(kind, tmp_path / "notes.txt")
    draft = DraftAttachments(tmp_path)
    attached = returns_within(lambda: draft.resolve("summarise @notes.txt please"))
    assert attached.attachments == []
    [problem] = attached.problems
    assert problem.startswith("notes.txt ")


def test_at_dev_stdin_never_reads_the_terminal() -> None:
    """`@/dev/stdin` in a message: kvchat's stdin is its terminal (a device)
    or, here under pytest, whatever fd 0 is; never read unless a regular file."""
    if stdin_is_regular():
        pytest.skip("fd 0 is a regular file here")
    draft = DraftAttachments(Path("/"))
    attached = returns_within(lambda: draft.resolve("what is @/dev/stdin"))
    assert attached.attachments == []
    assert attached.problems and attached.problems[0].startswith("/dev/stdin cannot be attached: ")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_import_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    _skip_if_stdin_is_a_file(kind)
    path = hostile_file(kind, tmp_path / "chat.json")
    with pytest.raises(ImportFormatError) as refused:
        returns_within(lambda: read_import_file(path))
    message = str(refused.value)
    assert message.startswith(f"Cannot import {path}: ")
    if kind == "huge":
        assert message.endswith("kvchat imports files up to 20 MB.")
    else:
        assert message.endswith(f"{WHY[kind]}.")
