"""What kvchat relies on in Textual's private internals, and the one work-around
it installs for the whole process; both only on the Textual versions kvchat
was tested with (`TESTED_TEXTUAL`). On another version `install` changes
nothing, the terminal input stays Textual's own (`chat.ui.terminal_input`),
and `untested_textual` says so for the app to tell the user.

- Page Up / Page Down in an option list whose options were just added (the
  command palette as its results arrive) raises KeyError in Textual 8.2
  (`OptionList._move_page` reads the line of the highlighted option before
  the list has laid its options out into lines). Found by pressing keys at
  random in the real app. The list is the command palette's own, which
  kvchat does not build, so the method is wrapped on `OptionList` itself:
  until the list is laid out there is no page to move by, and the key does
  nothing. (A fix Textual could take: `_move_page` waiting for the layout.)

A screen dismissed twice is handled by kvchat's own screen classes
(`chat.ui.screens.base`), not here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import textual
from textual.widgets import OptionList

TESTED_TEXTUAL = frozenset({"8.2.8"})
"""Textual versions whose internals the work-arounds and the input loop were
checked against (pyproject.toml allows only their minor version)."""


@functools.cache
def textual_version() -> str:
    """Textual's version, read once: `textual.__version__` reads the package's
    metadata again at each access (about a millisecond), and the screens ask
    at each frame (`chat.ui.frame_timer`)."""
    return textual.__version__


def textual_known() -> bool:
    return textual_version() in TESTED_TEXTUAL


def untested_textual() -> str | None:
    """A notice for the user when Textual is a version kvchat was not tested
    with, else None."""
    if textual_known():
        return None
    tested = ", ".join(sorted(TESTED_TEXTUAL))
    return (
        f"Textual {textual_version()} is not a version kvchat was tested with ({tested}): "
        "Textual's own input handling is used, so a long paste typed as keys is slower "
        "and a closed terminal is noticed later."
    )


def install() -> None:
    if textual_known():
        _page_keys_wait_for_layout()


def _page_keys_wait_for_layout() -> None:
    move: Callable[[OptionList, int], None] | None = getattr(OptionList, "_move_page", None)
    if move is None or getattr(move, "kvchat_guarded", False):
        return

    @functools.wraps(move)
    def move_once_laid_out(self: OptionList, direction: int) -> None:
        lines: Any = getattr(self, "_index_to_line", None)
        if lines is not None and (self.highlighted or 0) not in lines:
            return
        move(self, direction)

    move_once_laid_out.kvchat_guarded = True  # type: ignore[attr-defined]
    OptionList._move_page = move_once_laid_out  # type: ignore[method-assign]
