"""Screenshots of the dialogs that open from a reply or at quit, and of the
file picker, at 80x24, 120x40 and 60x20 (where dialogs take the whole screen
and stack their buttons); compared with the SVGs in `__snapshots__/` like
`test_snapshots.py`, whose fixed scene they share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DirectoryTree

from tests.conftest import wait_for
from tests.ui.conftest import chat_app, on_top
from tests.ui.screens.test_small_terminals import (
    open_attach_file,
    open_edit_reply,
    open_quit_unsaved,
)
from tests.ui.screens.test_snapshots import DIALOG_SIZES, steady


async def _snapshot_scene(
    pilot: Pilot[Any], opener: Callable[[Pilot[Any]], Awaitable[type[Screen[Any]]]]
) -> Screen[Any]:
    dialog = await on_top(pilot, await opener(pilot))
    await steady(pilot)
    return dialog


@DIALOG_SIZES
def test_edit_reply_dialog(size: tuple[int, int], snap_compare: Any) -> None:
    """F3 on a reply: its text in an editor, to save as a new branch or in place."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await _snapshot_scene(pilot, open_edit_reply)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


@DIALOG_SIZES
def test_quit_unsaved_dialog(size: tuple[int, int], snap_compare: Any) -> None:
    """Ctrl+Q while messages could not be saved: what is at stake and the ways out."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await _snapshot_scene(pilot, open_quit_unsaved)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


@DIALOG_SIZES
def test_attach_file_dialog(
    size: tuple[int, int], snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attaching a file (the palette): the folder it was started in, a path field."""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "notes.md").write_text("# Notes\n")
    (folder / "src" / "main.py").write_text("print('hi')\n")
    monkeypatch.chdir(folder)

    async def run_before(pilot: Pilot[Any]) -> None:
        dialog = await _snapshot_scene(pilot, open_attach_file)
        tree = dialog.query_one(DirectoryTree)
        await wait_for(lambda: len(tree.root.children) == 2, pilot)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)
