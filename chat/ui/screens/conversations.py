"""Saved conversations (Ctrl+O): browse, filter, rename, delete, open.

The list loads a page at a time, newest first, and the next page when the
cursor nears the end, so ten thousand conversations open as fast as ten. The
filter matches titles and message text (the store's search). The screen
dismisses with the id to open, "new" for a new conversation, or None.
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Label, Static

from chat.conversations.store import ConversationSummary, Store
from chat.errors import KvchatError
from chat.sanitize import sanitize
from chat.ui.screens.base import ListScreen
from chat.ui.screens.dialogs import ConfirmScreen, RenameScreen

OpenChoice = int | str | None
"""A conversation id to open, "new" to start one, or None to go back."""

COLUMNS = (
    ("Title", "title"),
    ("Model", "model"),
    ("Messages", "messages"),
    ("Last activity", "updated"),
)
NARROWED = ("title", "model")
"""The columns cut short (…) when the table is too narrow for every column:
the list scrolls only vertically, so each column must stay in sight."""
NARROWEST = 8


def relative_time(then: float, now: float) -> str:
    """`just now`, `3 min ago`, `5 h ago`, `yesterday`, `4 days ago`, then the date."""
    seconds = max(0.0, now - then)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    if days == 1:
        return "yesterday"
    if days < 7:
        return f"{days} days ago"
    return time.strftime("%Y-%m-%d", time.localtime(then))


def _one_line(text: str) -> str:
    """Titles may come from imported files: no escape sequences, no line breaks."""
    return " ".join(sanitize(text).split())


class ConversationTable(DataTable[Text]):
    """The list; its keys act on the highlighted conversation."""

    BINDINGS = [
        Binding("r", "rename", "Rename"),
        Binding("d,delete", "delete", "Delete"),
        # The list scrolls only vertically: Home and End go to the first and last row.
        Binding("home", "scroll_top", "First", show=False),
        Binding("end", "scroll_bottom", "Last", show=False),
    ]

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # Scrolled (by mouse too) near the end of what is loaded: load the next page.
        screen = self.screen
        if new_value >= self.max_scroll_y - 10 and isinstance(screen, ConversationsScreen):
            screen.load_more()

    def action_rename(self) -> None:
        screen = self.screen
        if isinstance(screen, ConversationsScreen):
            screen.rename_highlighted()

    def action_delete(self) -> None:
        screen = self.screen
        if isinstance(screen, ConversationsScreen):
            screen.delete_highlighted()

    def on_resize(self) -> None:
        screen = self.screen
        if isinstance(screen, ConversationsScreen):
            screen.fit_columns()


class ConversationsScreen(ListScreen[OpenChoice]):
    PAGE = 200
    FILTER_DEBOUNCE_S = 0.15

    BINDINGS = [
        Binding("escape", "close", "Back"),
        Binding("ctrl+n", "new", "New chat"),
        Binding("slash", "focus_filter", "Filter", show=False),
        Binding("down", "focus_table", "List", show=False),
    ]

    def __init__(
        self, store: Store, *, open_id: int | None = None, resumable: AbstractSet[int] = frozenset()
    ) -> None:
        super().__init__()
        self.store = store
        self.open_id = open_id
        """The conversation open in the chat screen (marked in the list)."""
        self.resumable = resumable
        """Conversations whose KV cache is saved for the model loaded (⚡ in the list)."""
        self.deleted: set[int] = set()
        self.renamed: dict[int, str] = {}
        self._rows: dict[int, ConversationSummary] = {}
        self._query = ""
        self._total = 0
        self._filter_timer: Timer | None = None
        self._narrowed: dict[str, int] = {}
        """The width of each column narrowed to fit (`fit_columns`)."""

    def compose(self) -> ComposeResult:
        yield Label("Saved conversations", id="conversations-title", classes="list-title")
        yield Input(
            placeholder="Filter by title or message text",
            id="conversations-filter",
            classes="list-filter",
        )
        yield ConversationTable(
            id="conversations-table", classes="list-table", cursor_type="row", zebra_stripes=True
        )
        yield Static("", id="conversations-count", classes="list-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self._add_columns()
        self.reload()
        self.table.focus()

    def _add_columns(self) -> None:
        table = self.table
        for label, key in COLUMNS:
            table.add_column(label, key=key, width=self._narrowed.get(key))

    # Every column stays in sight: when the table is too narrow for the
    # widest title and model name, those two columns share the room the
    # others leave (the model at most a third), and what is longer ends in "…".

    def fit_columns(self) -> None:
        """Narrow the title and model columns to the table's width (or widen
        them back), and show the rows in them anew if that changed them."""
        table = self.table
        if not table.size.width:
            return  # not laid out yet: its first resize fits them
        others = sum(
            column.get_render_width(table)
            for key, column in table.columns.items()
            if key.value not in NARROWED
        )
        room = table.scrollable_content_region.width - others - 2 * table.cell_padding * 2
        cells = [self._cells(summary, 0.0) for summary in self._rows.values()]
        title = max([len("Title"), *(row[0].cell_len for row in cells)])
        model = max([len("Model"), *(row[1].cell_len for row in cells)])
        narrowed: dict[str, int] = {}
        if title + model > room:
            model = min(model, max(NARROWEST, room // 3))
            narrowed = {"title": max(NARROWEST, room - model), "model": model}
        if narrowed == self._narrowed:
            return
        self._narrowed = narrowed
        highlighted = self.highlighted()
        table.clear(columns=True)
        self._add_columns()
        now = time.time()
        for summary in self._rows.values():
            table.add_row(*self._cells(summary, now), key=str(summary.id))
        if highlighted is not None:
            table.move_cursor(row=table.get_row_index(str(highlighted.id)))

    @property
    def table(self) -> ConversationTable:
        return self.query_one(ConversationTable)

    # -- loading

    def reload(self) -> None:
        """Show the first page for the current filter."""
        self.table.clear()
        self._rows.clear()
        try:
            self._total = self.store.count_conversations(self._query)
        except KvchatError as error:
            self.notify(str(error), severity="error", timeout=10, markup=False)
            self._total = 0
        self.load_more()
        self._show_count()

    def load_more(self) -> None:
        """The next page of the list, if there is more."""
        if len(self._rows) >= self._total:
            return
        try:
            page = self.store.list_conversations(self._query, self.PAGE, len(self._rows))
        except KvchatError as error:
            self.notify(str(error), severity="error", timeout=10, markup=False)
            return
        now = time.time()
        for summary in page:
            if summary.id in self._rows:  # moved up by an update from another window
                continue
            self._rows[summary.id] = summary
            self.table.add_row(*self._cells(summary, now), key=str(summary.id))
        if len(page) < self.PAGE:  # the list shrank meanwhile: stop asking for more
            self._total = len(self._rows)
        self._show_count()
        self.fit_columns()

    def _cells(self, summary: ConversationSummary, now: float) -> tuple[Text, ...]:
        # rich Text: DataTable measures it for the column widths, and never reads
        # markup in it (a title may be anything the user typed or imported).
        title = _one_line(summary.title) or "(untitled)"
        if summary.id == self.open_id:
            title = "● " + title
        return (
            # Cut short with "…" in a column narrowed to fit (`fit_columns`).
            Text(title, no_wrap=True, overflow="ellipsis"),
            Text(_one_line(summary.model_name), no_wrap=True, overflow="ellipsis"),
            Text(
                f"{'⚡ ' if summary.id in self.resumable else ''}{summary.message_count:,}",
                justify="right",
            ),
            Text(relative_time(summary.updated, now)),
        )

    def _show_count(self) -> None:
        shown = len(self._rows)
        if self._total == 0:
            text = (
                "No conversations match the filter."
                if self._query
                else "No saved conversations yet."
            )
        elif shown < self._total:
            text = f"showing {shown:,} of {self._total:,}: type to filter, scroll for more"
        else:
            text = f"{self._total:,} conversation{'s' if self._total != 1 else ''}"
        if self.resumable:
            text += "  ·  ⚡ resumes instantly"
        text += "  ·  Enter open · r rename · d delete · / filter · Esc back"
        self.query_one("#conversations-count", Static).update(Content(text))

    @on(DataTable.RowHighlighted)
    def _near_the_end(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row >= self.table.row_count - 20:
            self.load_more()

    # -- filtering

    @on(Input.Changed, "#conversations-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
        query = event.value

        def apply() -> None:
            self._query = query
            self.reload()

        self._filter_timer = self.set_timer(self.FILTER_DEBOUNCE_S, apply)

    @on(Input.Submitted, "#conversations-filter")
    def _filter_submitted(self) -> None:
        self.table.focus()
        self._open_highlighted()

    def action_focus_filter(self) -> None:
        self.query_one("#conversations-filter", Input).focus()

    def action_focus_table(self) -> None:
        self.table.focus()

    # -- acting on a conversation

    def highlighted(self) -> ConversationSummary | None:
        table = self.table
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None else self._rows.get(int(key))

    @on(DataTable.RowSelected)
    def _open_highlighted(self) -> None:
        summary = self.highlighted()
        if summary is not None:
            self.dismiss(summary.id)

    def rename_highlighted(self) -> None:
        summary = self.highlighted()
        if summary is None:
            return

        def renamed(title: str | None) -> None:
            if title is None or title == summary.title:
                return
            try:
                self.store.rename(summary.id, title)
            except KvchatError as error:
                self.notify(str(error), severity="error", timeout=10, markup=False)
                return
            summary.title = title
            self.renamed[summary.id] = title
            self.table.update_cell(
                str(summary.id), "title", self._cells(summary, time.time())[0], update_width=True
            )
            self.fit_columns()

        self.app.push_screen(RenameScreen(summary.title), renamed)

    def delete_highlighted(self) -> None:
        summary = self.highlighted()
        if summary is None:
            return
        title = _one_line(summary.title) or "(untitled)"
        count = summary.message_count
        text = (
            f"“{title}” and its {count:,} message{'s' if count != 1 else ''} will be deleted "
            "from the database. This cannot be undone."
        )
        if summary.id == self.open_id:
            text += " It is the conversation open now: the chat screen will start a new one."

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.store.delete_conversation(summary.id)
            except KvchatError as error:
                self.notify(str(error), severity="error", timeout=10, markup=False)
                return
            self.deleted.add(summary.id)
            del self._rows[summary.id]
            self.table.remove_row(str(summary.id))
            self._total -= 1
            self._show_count()

        self.app.push_screen(
            ConfirmScreen("Delete this conversation?", text, "Delete", danger=True), confirmed
        )

    def action_new(self) -> None:
        self.dismiss("new")

    def action_close(self) -> None:
        self.dismiss(None)
