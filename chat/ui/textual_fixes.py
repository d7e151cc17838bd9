"""Work-arounds for Textual bugs that would stop kvchat, each installed once
and guarded: on a Textual without the same internals it does nothing.

- Page Up / Page Down in an option list whose options were just added (the
  command palette as its results arrive) raised KeyError in Textual 8.2
  (`OptionList._move_page` reads the line of the highlighted option before
  the list has laid its options out into lines). Found by pressing keys at
  random in the real app; the same crash is reported against other Textual
  apps. Until then there is no page to move by: the key does nothing.
- A screen dismissed twice (Enter twice in quick succession in the model
  picker: the second Enter was queued before the picker had gone) called its
  result callback again and popped whichever screen was on top then, here the
  chat screen itself (ScreenStackError; under another dialog, that dialog).
  `Screen.dismiss` pops the top screen whatever it is: only the screen on top
  may now dismiss itself; a stale dismiss does nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from textual.app import ScreenStackError
from textual.await_complete import AwaitComplete
from textual.screen import Screen
from textual.widgets import OptionList


def install() -> None:
    _page_keys_wait_for_layout()
    _only_the_top_screen_dismisses()


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


def _only_the_top_screen_dismisses() -> None:
    dismiss: Callable[..., AwaitComplete] = Screen.dismiss
    if getattr(dismiss, "kvchat_guarded", False):
        return

    @functools.wraps(dismiss)
    def dismiss_if_on_top(self: Screen[Any], result: Any = None) -> AwaitComplete:
        try:
            on_top = self.app.screen is self
        except ScreenStackError:
            on_top = False
        if not on_top:
            return AwaitComplete.nothing()
        return dismiss(self, result)

    dismiss_if_on_top.kvchat_guarded = True  # type: ignore[attr-defined]
    Screen.dismiss = dismiss_if_on_top  # type: ignore[method-assign]
