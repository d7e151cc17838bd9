"""The find bar (Ctrl+F): find a text in the messages of the branch shown.

Typing highlights every occurrence in the messages on screen and makes the
newest one current (the conversation is read from the bottom, where a
terminal's scrollback search starts too); Enter or ↑ moves to the one before,
Shift+Enter or ↓ to the one after, wrapping at either end. The counter says
which one is current, "3 of 17", counted from the top. The current one is
scrolled into view; one in an older message that is not mounted yet is
reached by mounting the pages down to it (chat.ui.widgets.conversation_view).
Esc closes the bar, removes the highlights and gives the focus back.

The conversation's messages are searched (chat.conversations.find), so a reply still
streaming is not: it joins the search once it ends (the screen calls
`messages_changed` when a reply's text is drawn anew, or older messages are
mounted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Input, Static

from chat.conversations.conversation import Message
from chat.conversations.find import Search
from chat.sanitize import sanitize
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.match_highlight import Place, clear_view, highlight_view
from chat.ui.widgets.message_view import MessageView

KEYS = "Enter/↑ earlier · ↓ later · Esc close"


def _as_shown(text: str) -> str:
    """`text` as a message view shows it (chat.ui.widgets.message_view)."""
    return sanitize(text)


class FindBar(Horizontal):
    DEFAULT_CSS = """
    FindBar {
        height: 1;
        margin: 1 1 0 1;
        background: $panel;
        display: none;
    }
    FindBar.open {
        display: block;
    }
    FindBar > #find-label {
        width: auto;
        padding: 0 1;
        color: $text-muted;
    }
    FindBar > Input {
        width: 1fr;
    }
    FindBar > #find-count {
        width: auto;
        min-width: 10;
        padding: 0 1;
        text-align: right;
    }
    FindBar > #find-count.none {
        color: $warning;
    }
    FindBar > #find-keys {
        width: auto;
        padding: 0 1;
        color: $text-muted;
    }
    """

    BINDINGS = [
        Binding("escape", "close", "Close find", show=False),
        Binding("up", "step(-1)", "Earlier match", show=False),
        Binding("down", "step(1)", "Later match", show=False),
        Binding("shift+enter", "step(1)", "Later match", show=False),
    ]

    def __init__(self, view: ConversationView, messages: Callable[[], Sequence[Message]]) -> None:
        super().__init__(id="find")
        self._view = view
        self._messages = messages
        """The messages of the branch shown, read at each search."""
        self._shown: list[Message] = []
        """The messages the matches refer to (by index)."""
        self._search = Search("", [])
        self._going = False
        """A move to the current match is under way (`_go_to_current`)."""
        self._focus_back: Widget | None = None
        self._change_due = False

    def compose(self) -> ComposeResult:
        yield Static(Content("Find"), id="find-label", markup=False)
        yield Input(placeholder="in the conversation", compact=True, id="find-input")
        yield Static("", id="find-count", markup=False)
        yield Static(Content(KEYS), id="find-keys", markup=False)

    @property
    def is_open(self) -> bool:
        return self.has_class("open")

    @property
    def search(self) -> Search:
        """The query, its matches and the current one."""
        return self._search

    def open(self) -> None:
        """Show the bar (again: with the last query, selected) and focus it."""
        focused = self.app.focused
        if focused is not None and self not in focused.ancestors:
            self._focus_back = focused
        box = self.query_one(Input)
        if not self.is_open:
            self.add_class("open")
            self._research()
            self._show()
        box.focus()
        box.select_all()

    def action_close(self) -> None:
        """Esc: hide the bar and the highlights; the focus goes back where it was."""
        self.remove_class("open")
        for view in self._view.message_views():
            clear_view(view)
        back, self._focus_back = self._focus_back, None
        if back is not None and back.is_attached:
            back.focus()

    @on(Input.Changed)
    def _on_query_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._shown = list(self._messages())
        self._search = Search.of(self._texts(), event.value)
        self._search.step(-1)  # the newest match
        self._show()

    @on(Input.Submitted)
    def _on_query_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_step(-1)

    def action_step(self, step: int) -> None:
        """↑/Enter (-1): the match before the current one; ↓/Shift+Enter (1): after."""
        self._research()  # the conversation may have changed meanwhile
        self._search.step(step)
        self._show()

    def messages_changed(self) -> None:
        """The messages shown changed (a reply ended, another branch, older ones
        mounted): search them again, after the current burst of changes."""
        if self.is_open and not self._change_due:
            self._change_due = True
            self.call_after_refresh(self._on_messages_changed)

    def _on_messages_changed(self) -> None:
        self._change_due = False
        if self.is_open:
            self._research()
            self._highlight()
            self._show_counter()

    def _texts(self) -> list[str]:
        return [_as_shown(message.content) for message in self._shown]

    def _research(self) -> None:
        self._shown = list(self._messages())
        self._search.redo(self._texts())

    def _show(self) -> None:
        """Draw the counter and the highlights, and go to the current match."""
        self._show_counter()
        self._highlight()
        if self._search.current_match is not None:
            self.run_worker(self._go_to_current(), group="find")

    def _show_counter(self) -> None:
        count = self.query_one("#find-count", Static)
        count.update(Content(self._search.counter()))
        count.set_class(bool(self._search.query) and not self._search.total, "none")

    def _highlight(self) -> Place | None:
        """Highlight the matches in every message view mounted; where the current
        one is drawn, if it is mounted."""
        index = {id(message): i for i, message in enumerate(self._shown)}
        current = self._search.current_match
        query = self._search.query if self.is_open else ""
        place = None
        for view in self._view.message_views():
            position = index.get(id(view.message))
            if position is None or view.streaming or not query:
                clear_view(view)
                continue
            nth = current.nth if current is not None and current.message == position else None
            found = highlight_view(view, query, nth)
            if nth is not None:
                place = found or Place(view, 0)  # drawn differently: the message, then
        return place

    async def _go_to_current(self) -> None:
        """Mount the current match's message if need be, then scroll it into view.
        A move under way picks up a newer current match when it is done."""
        if self._going:
            return
        self._going = True
        try:
            target = None
            while (match := self._search.current_match) is not None and match != target:
                target = match
                if self._view.earlier_count:
                    # Said while older messages are mounted to reach it (a few
                    # hundred take seconds); at once replaced if it is mounted.
                    self.query_one("#find-count", Static).update(
                        Content(f"{self._search.counter()} · showing older messages…")
                    )
                await self._view.reveal(self._shown[match.message])
        finally:
            self._going = False
        self._show_counter()
        place = self._highlight()
        if place is not None:
            # After the layout of what was just mounted or highlighted.
            self.call_after_refresh(self._scroll_to_place, place)

    def _scroll_to_place(self, place: Place, tries: int = 40, waits: int = 200) -> None:
        """Scroll the conversation so that the current match's row is in sight,
        with the top of its message (who said it) when both fit in the view:
        left where it is if they are already, else the row to the middle."""
        view = self._view
        if not place.widget.is_attached or not tries:
            return
        if view.keeping_place and waits:
            # A page just mounted above is about to move the scroll by its
            # height: a scroll made now would be moved with it.
            self.set_timer(0.05, lambda: self._scroll_to_place(place, tries, waits - 1))
            return
        if not place.widget.region:
            # Mounted but not laid out yet (on a busy machine that can take
            # more than a refresh): its place is not known, so look again soon.
            self.set_timer(0.05, lambda: self._scroll_to_place(place, tries - 1, waits))
            return
        message = next(
            (w for w in place.widget.ancestors_with_self if isinstance(w, MessageView)), None
        )
        origin = view.content_region.y - round(view.scroll_y)
        row = place.widget.content_region.y - origin + place.line
        height = view.scrollable_content_region.height
        top = row if message is None else message.region.y - origin
        if row - top >= height:
            top = row  # a long message: its top cannot be in sight with the row
        if view.scroll_y <= top and row < view.scroll_y + height:
            return
        view.scroll_to(y=max(0, min(top, row - height // 2)), animate=False, immediate=True)
        # Where things were may have been laid out from views still growing
        # (a page just mounted): look again once this scroll is drawn.
        self.call_after_refresh(self._scroll_to_place, place, tries - 1, waits)
