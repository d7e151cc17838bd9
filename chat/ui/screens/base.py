"""The base classes of kvchat's own screens and dialogs.

A screen dismissed twice (Enter twice in quick succession in the model
picker: the second Enter was queued before the picker had gone) called its
result callback again and popped whichever screen was on top by then, here
the chat screen itself (ScreenStackError), under another dialog that dialog:
Textual's `Screen.dismiss` pops the top screen, whatever it is. kvchat's
screens may only dismiss themselves while they are on top; a stale dismiss
does nothing. (A fix Textual itself could take: `dismiss` checking that the
screen is the one on top.)
"""

from __future__ import annotations

from typing import Any, TypeVar

from textual.app import ScreenStackError
from textual.await_complete import AwaitComplete
from textual.screen import ModalScreen, Screen

from chat.ui.frame_timer import DrawsWhenAsked

ResultType = TypeVar("ResultType")


def _on_top(screen: Screen[Any]) -> bool:
    try:
        return screen.app.screen is screen
    except ScreenStackError:
        return False


# Two classes, not one and a subclass: a screen class between `Dialog` and
# `ModalScreen` would bring `Screen`'s default CSS back after `ModalScreen`'s
# (Textual reads each class's DEFAULT_CSS along the MRO).


class KvchatScreen(DrawsWhenAsked, Screen[ResultType]):
    """A full screen that answers once."""

    def dismiss(self, result: ResultType | None = None) -> AwaitComplete:
        if not _on_top(self):
            return AwaitComplete.nothing()
        return super().dismiss(result)


class ListScreen(KvchatScreen[ResultType]):
    """A full screen that lists things: a title, filter boxes, a table and a
    status line, laid out alike wherever kvchat lists something (saved
    conversations, models). Its widgets carry the classes below."""

    DEFAULT_CSS = """
    ListScreen {
        layout: vertical;
    }
    ListScreen .list-title {
        padding: 0 1;
        text-style: bold;
        color: $primary;
    }
    ListScreen .list-filter {
        margin: 0 1;
    }
    ListScreen .list-table {
        height: 1fr;
        margin: 0 1;
    }
    ListScreen .list-status {
        /* Wraps on a narrow terminal rather than cutting its hints off. */
        height: auto;
        padding: 0 1;
        color: $text-muted;
    }
    """


class Dialog(DrawsWhenAsked, ModalScreen[ResultType]):
    """A modal dialog that answers once."""

    def dismiss(self, result: ResultType | None = None) -> AwaitComplete:
        if not _on_top(self):
            return AwaitComplete.nothing()
        return super().dismiss(result)
