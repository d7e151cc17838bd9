"""Widgets of the token view: a reply split into its tokens, and the
distribution one token was sampled from.

Token texts are model output: they are shown as plain text (Rich segments or
`Content`, never markup), and whitespace is made visible where a token is
shown on its own ("␣" for a space, "⏎" for a newline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget
from textual.widgets import Static

from chat.conversations.conversation import TokenChoice

NEWLINE_MARK = "⏎"
SPACE_MARK = "␣"
TAB_MARK = "⇥"
EMPTY_MARK = "∅"
"""A token with no text of its own (e.g. a special token)."""


def visible_whitespace(text: str) -> str:
    """A token's text with every space, newline and tab made visible."""
    if not text:
        return EMPTY_MARK
    return text.replace(" ", SPACE_MARK).replace("\n", NEWLINE_MARK).replace("\t", TAB_MARK)


def format_prob(prob: float) -> str:
    """`61.2%`, `0.42%`, `<0.01%`: precise where small numbers differ."""
    if prob <= 0:
        return "0%"
    if prob < 0.0001:
        return "<0.01%"
    if prob < 0.01:
        return f"{prob:.2%}"
    return f"{prob:.1%}"


def _prefix(text: str, cells: int) -> str:
    """The longest start of `text` that fits in `cells` terminal cells."""
    width = 0
    for i, char in enumerate(text):
        width += cell_len(char)
        if width > cells:
            return text[:i]
    return text


def shorten(text: str, cells: int) -> str:
    """Cut `text` to at most `cells` terminal cells, marking the cut with "…"."""
    if cell_len(text) <= cells:
        return text
    return _prefix(text, cells - 1) + "…"


# -- the reply as tokens ----------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """Part of one token's text as placed on one line of the strip."""

    token: int
    text: str
    x: int
    width: int


def _display_chunks(text: str) -> list[tuple[str, bool]]:
    """A token's text as (shown text, ends a line) chunks: each newline shows as
    "⏎" and breaks the line, tabs show as "⇥", an empty token as "∅"."""
    if not text:
        return [(EMPTY_MARK, False)]
    parts = text.replace("\t", TAB_MARK).split("\n")
    chunks = [(part + NEWLINE_MARK, True) for part in parts[:-1]]
    if parts[-1]:
        chunks.append((parts[-1], False))
    return chunks


def layout_tokens(texts: Sequence[str], width: int) -> list[list[Piece]]:
    """Lines of pieces: tokens are wrapped whole at token boundaries (a token
    wider than the line is split), and newlines in tokens break lines."""
    width = max(width, 2)
    lines: list[list[Piece]] = [[]]
    x = 0
    for index, text in enumerate(texts):
        for chunk, breaks in _display_chunks(text):
            rest = chunk
            while rest:
                size = cell_len(rest)
                if x + size <= width:
                    lines[-1].append(Piece(index, rest, x, size))
                    x += size
                    break
                if x > 0:  # wrap before the token rather than inside it
                    lines.append([])
                    x = 0
                    continue
                head = _prefix(rest, width) or rest[0]
                lines[-1].append(Piece(index, head, 0, cell_len(head)))
                lines.append([])
                rest = rest[len(head) :]
            if breaks:
                lines.append([])
                x = 0
    if not lines[-1] and len(lines) > 1:
        lines.pop()
    return lines


class TokenStrip(ScrollView, can_focus=True):
    """A reply's text, token by token, each on a subtly alternating background.

    A cursor (Left/Right/Up/Down/Home/End, or a click) marks one token; the
    mouse hovering over a token shows that one instead, until it leaves or the
    cursor moves. Either change posts `Shown` with the token whose details
    should be displayed. Tokens sampled outside the greedy choice are underlined;
    a reasoning model's thinking tokens are in italics, muted.
    """

    COMPONENT_CLASSES = {
        "token-strip--even",
        "token-strip--odd",
        "token-strip--off-greedy",
        "token-strip--thinking",
        "token-strip--cursor",
        "token-strip--hover",
    }

    BINDINGS = [
        Binding("left", "move(-1)", "Previous token", show=False),
        Binding("right", "move(1)", "Next token", show=False),
        Binding("up", "line(-1)", "Line up", show=False),
        Binding("down", "line(1)", "Line down", show=False),
        Binding("home", "to_token(0)", "First token", show=False),
        Binding("end", "to_token(-1)", "Last token", show=False),
    ]

    @dataclass
    class Shown(Message):
        """The token whose details the view should show changed: `index` in `strip`."""

        strip: TokenStrip
        index: int

    cursor: reactive[int] = reactive(0, always_update=True)
    hover: reactive[int | None] = reactive(None)

    def __init__(
        self,
        texts: Sequence[str],
        off_greedy: Sequence[bool] = (),
        *,
        thinking: Sequence[bool] = (),
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.texts = list(texts)
        self._off_greedy = list(off_greedy) or [False] * len(self.texts)
        self.thinking = list(thinking) or [False] * len(self.texts)
        """Which tokens are the model's thinking."""
        self._lines: list[list[Piece]] = []
        self._token_line: list[int] = []
        self._width = 0

    @property
    def shown(self) -> int:
        """The token the detail panel shows: hovered, else the cursor's."""
        return self.hover if self.hover is not None else self.cursor

    @property
    def lines(self) -> list[list[Piece]]:
        return self._lines

    def line_text(self, y: int) -> str:
        """What line `y` shows, as plain text (for tests and screen readers)."""
        return "".join(piece.text for piece in self._lines[y])

    # -- layout

    def _relayout(self) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._width:
            return
        self._width = width
        self._lines = layout_tokens(self.texts, width)
        first: dict[int, int] = {}
        for y, line in enumerate(self._lines):
            for piece in line:
                first.setdefault(piece.token, y)
        self._token_line = [first.get(i, 0) for i in range(len(self.texts))]
        self.virtual_size = Size(width, len(self._lines))
        self.refresh()

    def on_resize(self) -> None:
        self._relayout()
        self.call_after_refresh(self._scroll_to_cursor)

    def on_mount(self) -> None:
        self._relayout()

    # -- drawing

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        line_index = scroll_y + y
        if line_index >= len(self._lines):
            return Strip.blank(width, base)
        segments = [
            Segment(piece.text, self._piece_style(piece.token)) for piece in self._lines[line_index]
        ]
        return Strip(segments).crop_extend(scroll_x, scroll_x + width, base)

    def _piece_style(self, index: int) -> Style:
        style = self.get_component_rich_style(
            "token-strip--odd" if index % 2 else "token-strip--even"
        )
        if self.thinking[index]:
            style += self.get_component_rich_style("token-strip--thinking", partial=True)
        if self._off_greedy[index]:
            style += self.get_component_rich_style("token-strip--off-greedy", partial=True)
        if index == self.hover and index != self.cursor:
            style += self.get_component_rich_style("token-strip--hover", partial=True)
        if index == self.cursor:
            style += self.get_component_rich_style("token-strip--cursor", partial=True)
        return style

    # -- cursor and hover

    def validate_cursor(self, cursor: int) -> int:
        return max(0, min(cursor, len(self.texts) - 1))

    def watch_cursor(self) -> None:
        # The keys (or a click) win over the mouse resting on another token.
        self.set_reactive(TokenStrip.hover, None)
        self.refresh()
        self._scroll_to_cursor()
        self.post_message(self.Shown(self, self.shown))

    def watch_hover(self) -> None:
        self.refresh()
        self.post_message(self.Shown(self, self.shown))

    def _scroll_to_cursor(self) -> None:
        if self._token_line and self.cursor < len(self._token_line):
            line = self._token_line[self.cursor]
            self.scroll_to_region(Region(0, line, 1, 1), animate=False, immediate=True)

    def action_move(self, delta: int) -> None:
        self.cursor += delta

    def action_to_token(self, index: int) -> None:
        self.cursor = index if index >= 0 else len(self.texts) - 1

    def action_line(self, delta: int) -> None:
        """Move to the token on the line above or below, at the same column."""
        if not self._lines:
            return
        current = self._token_line[self.cursor]
        x = next(p.x for p in self._lines[current] if p.token == self.cursor)
        target = current + delta
        while 0 <= target < len(self._lines) and not self._lines[target]:
            target += delta  # (an empty line cannot happen, but never loop on one)
        if not 0 <= target < len(self._lines):
            self.cursor = 0 if delta < 0 else len(self.texts) - 1
            return
        pieces = self._lines[target]
        under = [p for p in pieces if p.x <= x]
        self.cursor = (under[-1] if under else pieces[0]).token

    def token_at(self, x: int, y: int) -> int | None:
        """The token drawn at content offset (x, y), if any."""
        scroll_x, scroll_y = self.scroll_offset
        line = y + scroll_y
        if not 0 <= line < len(self._lines):
            return None
        column = x + scroll_x
        for piece in self._lines[line]:
            if piece.x <= column < piece.x + piece.width:
                return piece.token
        return None

    def on_mouse_move(self, event: events.MouseMove) -> None:
        offset = event.get_content_offset(self)
        self.hover = None if offset is None else self.token_at(offset.x, offset.y)

    def on_leave(self) -> None:
        self.hover = None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        index = None if offset is None else self.token_at(offset.x, offset.y)
        if index is not None:
            self.cursor = index
            self.hover = None


# -- one token's distribution ---------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: float, cells: int) -> str:
    """A horizontal bar `cells` wide, filled to `fraction` in eighths of a cell."""
    eighths = round(max(0.0, min(1.0, fraction)) * cells * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(cells)


class ProbabilityBars(Widget):
    """A titled list of tokens and their probabilities, as bars.

    `chosen` is the index in `entries` of the token that was sampled (drawn
    highlighted), or None when it is not among them; then `extra` can name it
    on a last line.
    """

    COMPONENT_CLASSES = {
        "prob-bars--title",
        "prob-bars--bar",
        "prob-bars--chosen",
        "prob-bars--muted",
    }

    LABEL_CELLS = 14

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.entries: list[tuple[str, float]] = []
        self.chosen: int | None = None
        self.extra: tuple[str, float] | None = None
        self.note = ""

    def show(
        self,
        entries: Sequence[tuple[str, float]],
        chosen: int | None,
        extra: tuple[str, float] | None = None,
        note: str = "",
    ) -> None:
        self.entries = list(entries)
        self.chosen = chosen
        self.extra = extra
        self.note = note
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 + max(len(self.entries), 1) + (1 if self.extra else 0) + (1 if self.note else 0)

    def row_text(self, text: str, prob: float, bar_cells: int) -> tuple[str, str, str]:
        label = shorten(visible_whitespace(text), self.LABEL_CELLS).ljust(self.LABEL_CELLS)
        return label, bar(prob, bar_cells), format_prob(prob).rjust(7)

    def render(self) -> Content:
        def style(name: str) -> VisualStyle:
            return self.get_visual_style(f"prob-bars--{name}", partial=True)

        bar_cells = max(4, self.size.width - self.LABEL_CELLS - 11)
        lines: list[Content] = [Content.styled(self.title, style("title"))]
        if not self.entries:
            lines.append(Content.styled("(nothing recorded)", style("muted")))
        for i, (text, prob) in enumerate(self.entries):
            label, bars, percent = self.row_text(text, prob, bar_cells)
            mark = "▸ " if i == self.chosen else "  "
            row = Content.assemble(mark, label, " ", (bars, style("bar")), " ", percent)
            lines.append(row.stylize(style("chosen")) if i == self.chosen else row)
        if self.extra is not None:
            label, bars, percent = self.row_text(*self.extra, bar_cells)
            row = Content.assemble("▸ ", label, " ", (bars, style("bar")), " ", percent)
            lines.append(row.stylize(style("chosen")))
        if self.note:
            lines.append(Content.styled(self.note, style("muted")))
        return Content("\n").join(lines)


def chosen_index(entries: Sequence[tuple[str, float]], text: str, prob: float) -> int | None:
    """Where the sampled token is in a top list (matched by text and probability)."""
    for i, (entry_text, entry_prob) in enumerate(entries):
        if entry_text == text and abs(entry_prob - prob) <= 1e-9 * max(1.0, prob):
            return i
    for i, (entry_text, _) in enumerate(entries):
        if entry_text == text:
            return i
    return None


class TokenDetail(Widget):
    """Everything about one token: which it is, how likely it was, and the top
    alternatives after the sampling settings and in the raw distribution."""

    DEFAULT_CLASSES = "token-detail"

    def compose(self) -> ComposeResult:
        yield Static("", id="token-title", markup=False)
        yield Static("", id="token-probability", markup=False)
        with Horizontal(id="token-bars"):
            yield ProbabilityBars("After your sampling settings", id="sampled-bars")
            yield ProbabilityBars("Raw model distribution", id="raw-bars")

    def show(self, choice: TokenChoice, index: int, count: int, thinking: bool = False) -> None:
        title = Content.assemble(
            f"Token {index + 1} of {count}  ",
            (f"“{visible_whitespace(choice.text)}”", "bold"),
            f"  id {choice.token_id}",
        )
        if thinking:
            title += Content("  · thinking")
        if not choice.greedy:
            title += Content("  · sampled outside the greedy choice")
        self.query_one("#token-title", Static).update(title)
        self.set_class(not choice.greedy, "off-greedy")
        self.query_one("#token-probability", Static).update(
            Content(
                f"Probability {format_prob(choice.prob)} after your sampling settings · "
                f"{format_prob(choice.raw_prob)} in the raw model distribution"
            )
        )
        for bars_id, entries, prob in (
            ("#sampled-bars", choice.top, choice.prob),
            ("#raw-bars", choice.raw_top, choice.raw_prob),
        ):
            where = chosen_index(entries, choice.text, prob)
            extra = (choice.text, prob) if where is None else None
            note = "chosen token not among these" if where is None and prob > 0 else ""
            if prob <= 0:
                note = "the chosen token was outside this distribution"
            self.query_one(bars_id, ProbabilityBars).show(entries, where, extra, note)
