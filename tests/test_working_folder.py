"""Relative paths start from the current folder, which may be removed while
kvchat runs: then they name no file, and nothing raises (chat.paths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat import paths
from chat.conversations.attachments import AttachmentError, read_attachment
from chat.conversations.transcript.files import default_folder
from chat.session.draft_attachments import complete_path, relative_name


def test_a_removed_current_folder_names_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    (tmp_path / "notes.txt").write_text("elsewhere")
    monkeypatch.chdir(gone)
    monkeypatch.setenv("PWD", str(gone))
    gone.rmdir()
    assert paths.working_folder() == gone
    with pytest.raises(AttachmentError, match="does not exist"):
        read_attachment("notes.txt")
    assert complete_path("no") == []
    assert relative_name(tmp_path / "notes.txt") == str(tmp_path / "notes.txt")
    assert default_folder() == paths.data_dir() / "exports"  # not writable there
    # Without the shell's PWD: a folder that is not there either.
    monkeypatch.delenv("PWD")
    assert not paths.working_folder().exists()
