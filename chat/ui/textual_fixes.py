"""Work-arounds for Textual bugs that would stop kvchat, each installed once
and guarded: on a Textual without the same internals it does nothing.

- Page Up / Page Down in an option list whose options were just added (the
  command palette as its results arrive) raised KeyError in Textual 8.2
  (`OptionList._move_page` reads the line of the highlighted option before
  the list has laid its options out into lines). Found by pressing keys at
  random in the real app; the same crash is reported against other Textual
  apps. Until then there is no page to move by: the key does nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from textual.widgets import OptionList


def install() -> None:
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
