"""A reply's answer, drawn as it streams: Textual's Markdown with blocks
that grow in place.

Most deliveries of a streaming reply add words to its last paragraph, or code
to its last code block. Textual's Markdown parses the last block again at
each delivery, builds a new widget from it and draws all of its rows again,
and lays the screen out whenever the block's height changes. Here the last
block grows in place (no parse where plain words or code are only added), a
streaming block keeps a reserve of blank lines so that most new lines need no
layout, and only the rows that changed are drawn again (docs/performance.md,
"The UI's cost while a reply streams"). When the reply ends, the blocks stay
where they are what Markdown builds from the whole text.

Imported on first use (chat.ui.widgets.message_view): importing Textual's
Markdown costs time that a new chat's first frame need not pay.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import _RenderCache  # Textual's own; see CodeLabel
from textual.widgets import Label, Markdown
from textual.widgets._markdown import MarkdownParagraph  # not re-exported by textual 8
from textual.widgets.markdown import MarkdownBlock, MarkdownFence

from chat.ui.code_highlighting import block_language
from chat.ui.markdown_parser import markdown_parser
from chat.ui.widgets.code_lines import grown, with_new_lines_highlighted
from chat.ui.widgets.copy_button import CopyButton
from chat.ui.widgets.fence_growth import grown_fence
from chat.ui.widgets.growing_wrap import GrowingWrap, Row, RowKey, appended_to
from chat.ui.widgets.plain_words import words_added
from chat.ui.widgets.sized_by_layout import DrawnAgainByTheLayout, SizedByTheLayout, WidgetMixin

if TYPE_CHECKING:
    from markdown_it.token import Token
    from textual.visual import VisualType
    from textual.widget import AwaitMount, Widget
    from typing_extensions import Self


STREAM_RESERVE_LINES = 3
"""Blank lines a streaming paragraph takes ahead of its text: the screen is
laid out once for these lines, not once for each (docs/performance.md)."""
STREAM_CODE_RESERVE_LINES = 7
"""The same for a streaming code block, whose lines come about three times as
fast as a paragraph's (short lines, not wrapped): with 3, 10 of the 13 layouts
of the benchmark's code reply were the block taking its reserve
(docs/performance.md, "A code block reserves seven lines")."""
SETTLED_KINDS = frozenset(
    {
        "paragraph_open",
        "heading_open",
        "hr",
        "blockquote_open",
        "bullet_list_open",
        "ordered_list_open",
        "fence",
        "code_block",
    }
)
"""The blocks that stream as Markdown builds them from the whole text, as the
first token of each: a reply whose text holds another kind is built again
when it ends (HTML; a table, whose rows Markdown's append updates in place,
in widgets of other kinds than a table built whole)."""
HIGHLIGHT_EVERY_S = 0.5
"""How often a streaming code block's code is highlighted again, whole (`CopyableFence.grow`)."""
RUN_MAX_CHARS = 3000
"""How much text a streaming paragraph draws, with the paragraphs it took
in above it (`Paragraph.take_in`), before a new paragraph is mounted as
Markdown mounts it: each delivery's cost grows a little with the text the
last paragraph draws (its text joined, compared and its rows keyed), and a
layout every 3,000 characters or so is a few ms (docs/performance.md, "A
reply's paragraphs stream in one widget")."""
PARAGRAPH_GAP = Content("\n\n")
"""What stands between two paragraphs drawn by one widget: the end of the
first one's last row, and the blank row of a paragraph's bottom margin."""


def code_rows(code: Content) -> list[Row]:
    """The lines of a code block's code, each a row (code is not wrapped)."""
    return line_rows(code.split("\n", allow_blank=True))


def line_rows(lines: list[Content], kept: list[Row] | None = None) -> list[Row]:
    """Code's `lines`, each a row; the first rows are `kept` (the rows of
    those lines already made)."""
    rows = list(kept or ())
    start = rows[-1].start + len(rows[-1].content.plain) + 1 if rows else 0
    for y in range(len(rows), len(lines)):
        rows.append(Row(lines[y], 0, y, start))
        start += len(lines[y].plain) + 1
    return rows


def _text_shape(text: str) -> tuple[int, int]:
    """How many lines `text` has, and the cells of its widest (measured as
    Textual measures a Label's width: Content.get_optimal_width)."""
    lines = text.split("\n")
    return len(lines), max(map(cell_len, lines))


class RepaintsFromALine(WidgetMixin):
    """For a widget whose next refresh may repaint only its lines from
    `_repaint_from` down to `_repaint_to`: text added at the end of a
    streaming block changes its last lines only, and the lines above are
    drawn as they were; the blank lines below the text (the reserve a
    streaming block is laid out with) stay blank, and are not drawn again
    either (they were at every delivery: 4-8 % of the bytes sent to the
    terminal, docs/performance.md, "The reserve's blank lines drawn once")."""

    _repaint_from: int | None = None
    """The first line the next refresh repaints (None: all of them)."""
    _repaint_to: int | None = None
    """The line after the last one it repaints (None: to the bottom)."""

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        start = self._repaint_from
        if start is not None and not (regions or layout or recompose):
            width, height = self.content_size
            end = height if self._repaint_to is None else min(height, self._repaint_to)
            regions = (Region(0, start, width, max(0, end - start)),)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _repaint_lines(self, start: int | None, end: int | None = None) -> None:
        """The lines the next refresh repaints: from `start` to `end` (None:
        all of them; to the bottom)."""
        self._repaint_from, self._repaint_to = start, end


def is_streaming_answer(body: object) -> bool:
    """`body` is the answer of a reply that streams."""
    return isinstance(body, ReplyMarkdown) and body.streaming


def in_streaming_answer(block: Widget) -> bool:
    """The block is in the answer of a reply that streams."""
    return is_streaming_answer(block.parent)


class DrawsRowsOnce(WidgetMixin):
    """Draws its text a row at a time, and keeps the rows it drew by
    place, text and styles: a row drawn before is not drawn again. A
    streaming block changes at each delivery, and Textual draws each of
    its rows again; here only its new rows are drawn (docs/performance.md,
    "The code is drawn a line at a time", "A paragraph wrapped from its
    last row"). What is drawn is what Textual draws: each row is drawn
    alone as Textual draws it among the others, and marked with its place
    in the text, as Textual marks each cell for selecting with the mouse."""

    _drawn_rows: dict[RowKey, list[Strip]] | None = None
    """The rows drawn last, in order, by key (`Row.key`)."""
    _drawn_for: tuple[int, object] | None = None
    """The width and base style the kept rows were drawn at."""

    def _rows(self, content: Content, width: int) -> list[Row] | None:
        """The rows of `content` at `width`; None where Textual draws it itself."""
        raise NotImplementedError

    def _render_content(self) -> None:
        visual = self._render()
        width, height = self.size
        rows = None
        if (
            isinstance(visual, Content)
            and self.text_selection is None
            and self.styles.content_align == ("left", "top")
        ):
            rows = self._rows(visual, width)
        if rows is None:
            self._drawn_rows = None
            super()._render_content()
            return
        style = self.visual_style
        if self._drawn_for != (width, style):
            self._drawn_rows, self._drawn_for = None, (width, style)
        drawn = self._drawn_rows or {}
        kept: dict[RowKey, list[Strip]] = {}
        strips: list[Strip] = []
        for row in rows[:height]:
            key = row.key
            row_strips = drawn.get(key)
            if row_strips is None:
                # Drawn alone, a row is marked as the text's first.
                row_strips = [
                    strip.apply_offsets(row.x, row.y) if row.x or row.y else strip
                    for strip in Visual.to_strips(self, row.content, width, None, style)
                ]
            kept[key] = row_strips
            strips.extend(row_strips)
        self._drawn_rows = kept
        self._render_cache = _RenderCache(self.size, strips[:height])
        self._dirty_regions.clear()


class CodeLabel(SizedByTheLayout, DrawsRowsOnce, RepaintsFromALine, Label):
    """A code block's code, drawn a line at a time (`DrawsRowsOnce`), and
    a change repaints the code from its first changed line down. Textual
    draws a label's every line at each change, and a streaming code block
    changes at each delivery: with 100 lines of Python on screen, most of
    the 27-29 ms of UI thread a delivery took (docs/performance.md). The
    code is not wrapped: the block is as wide as its widest line."""

    _known: tuple[Content, list[Row]] | None = None
    """Code whose rows are known without splitting it (`show_lines`)."""

    def _rows(self, content: Content, width: int) -> list[Row]:
        if self._known is not None and self._known[0] is content:
            return self._known[1]
        return code_rows(content)

    def show_lines(
        self, content: Content, lines: list[Content], changed_from: int, layout: bool
    ) -> None:
        """New code, `content`, whose lines are `lines`, the same as the
        code shown before it up to line `changed_from`: neither split nor
        compared line by line (the code grows at each delivery of a
        streaming block; a split of all of it cost more with each line)."""
        kept = self._known[1][:changed_from] if self._known is not None else []
        self._known = (content, line_rows(lines, kept))
        # Code grows at its end: the lines below it are the reserve's, blank.
        self._repaint_lines(changed_from, len(lines))
        try:
            Label.update(self, content, layout=layout)
        finally:
            self._repaint_lines(None)

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        """New code: the screen repaints it from its first changed line
        down (code added at the end changes only its last lines), as the
        streaming paragraph does."""
        self._known = None
        if isinstance(content, Content) and self._drawn_rows:
            same = 0
            rows = code_rows(content)
            for old, new in zip(self._drawn_rows, rows, strict=False):
                if old != new.key:
                    break
                same += 1
            # Down to the last line of the longer code, the old or the new.
            self._repaint_lines(same, max(len(self._drawn_rows), len(rows)))
        try:
            super().update(content, layout=layout)
        finally:
            self._repaint_lines(None)


class CopyableFence(SizedByTheLayout, MarkdownFence):
    _shape: tuple[int, int] | None = None  # of the code shown: lines, widest
    _highlighted_at = 0.0
    """When the code was last highlighted whole while it grew (`grow`)."""
    _reserved = 0
    """Lines laid out for the code while it streams (its lines and the reserve)."""

    def compose(self) -> ComposeResult:
        yield CopyButton(lambda: self.code, "the code block", classes="fence-copy")
        yield CodeLabel(self._highlighted_code, id="code-content", expand=True)

    _lines: list[Content] | None = None
    """The lines of the code shown (None: not kept, split on need)."""
    _stable = 0
    """How many of `_lines`, from the first, are highlighted as they are now."""

    def set_content(
        self,
        content: Content,
        *,
        lines: list[Content] | None = None,
        changed_from: int = 0,
    ) -> None:
        """New code (a streamed code block grows with each delivery): as for
        a paragraph, the screen is laid out again only when the code's size
        changes: a line more, or a line wider than any before (the block
        scrolls sideways, so its code is as wide as its widest line). While
        the reply streams, the code is laid out at least as wide as the
        block, and a line more takes STREAM_CODE_RESERVE_LINES more, as a
        paragraph takes STREAM_RESERVE_LINES: most deliveries then draw
        the block without a layout.
        `lines`: the code's lines, the same as those shown before up to
        line `changed_from` (the code grew): neither split nor measured
        whole again."""
        self._content = content
        old, self._lines = self._shape, lines
        if lines is None or old is None:
            shape = _text_shape(content.plain)
        else:
            added = [cell_len(line.plain) for line in lines[changed_from:]]
            shape = (len(lines), max([old[1], *added]))
        self._shape = shape
        for label in self.query("#code-content").results(CodeLabel):
            layout = shape != old
            count, widest = shape
            if layout and in_streaming_answer(self):
                if count > self._reserved:
                    self._reserved = count + STREAM_CODE_RESERVE_LINES
                    label.styles.min_height = self._reserved
                    label.styles.min_width = "100%"
                else:  # a line more fills a reserved one; wider needs room
                    layout = widest > label.content_size.width
            if lines is None:
                label.update(content, layout=layout)
            else:
                label.show_lines(content, lines, changed_from, layout)

    @classmethod
    def highlight(cls, code: str, language: str, ansi: bool = False, dark: bool = False) -> Content:
        # Not guessed when the block names none (chat.ui.code_highlighting).
        return super().highlight(code, block_language(language), ansi, dark)

    def highlight_whole(self) -> None:
        """The code is complete (the reply ended with it): highlighted whole,
        as Markdown highlights a block it builds."""
        self._highlighted_at = time.monotonic()
        self._highlighted_code = self._highlighted(self.code)
        self.set_content(self._highlighted_code)

    def _highlighted(self, code: str) -> Content:
        return self.highlight(
            code,
            self.lexer,
            ansi=self.app.native_ansi_color,
            dark=self.app.current_theme.dark,
        )

    def grow(self, code: str) -> None:
        """The streaming block's code is now `code` (the code it had, with
        more after it). Highlighting costs about 0.13 ms a line of Python
        here: 10 ms by line 80, were all of the code highlighted each time.
        What a delivery adds is drawn in the code's plain colour; every
        HIGHLIGHT_EVERY_S the lines added since are highlighted
        (chat.ui.widgets.code_lines). The block is highlighted whole when
        it is complete, or when the reply ends."""
        highlighted, done = self._highlighted_code, self.code
        self.code = code
        if not code.startswith(done):
            self.highlight_whole()
            return
        lines = self._lines
        if lines is None:  # set whole (Markdown's own append): highlighted whole
            lines = highlighted.split("\n", allow_blank=True)
            self._stable = len(lines) - 1
        if time.monotonic() - self._highlighted_at >= HIGHLIGHT_EVERY_S:
            self._highlight_new_lines(lines)
            return
        added = code[len(done) :]
        if added:
            self._highlighted_code = highlighted + Content(added).stylize_before("$text")
            self.set_content(
                self._highlighted_code, lines=grown(lines, added), changed_from=len(lines) - 1
            )

    def _highlight_new_lines(self, lines: list[Content]) -> None:
        """The lines added since the last highlight, highlighted; all of
        the code where that cannot be done alone."""
        stable = min(self._stable, len(lines) - 1)
        new_lines = with_new_lines_highlighted(lines, stable, self.code, self._highlighted)
        if new_lines is None:
            self.highlight_whole()
            return
        self._highlighted_at = time.monotonic()
        self._stable = len(new_lines) - 1
        self._highlighted_code = Content("\n").join(new_lines)
        self.set_content(self._highlighted_code, lines=new_lines, changed_from=stable)

    def end_reserve(self) -> None:
        """No longer the reply's last block: as tall and wide as its code."""
        if self._reserved:
            self._reserved = 0
            for label in self.query("#code-content").results(Label):
                label.styles.min_height = None
                label.styles.min_width = None


@dataclass(frozen=True)
class FinishedParagraph:
    """A paragraph of a streaming reply that another one began after, drawn
    by the one after it until it gets a widget of its own (`Paragraph.take_in`)."""

    token: Token
    """Its `paragraph_open` token, as Markdown builds a paragraph from it."""
    inline: Token
    content: Content
    source_range: tuple[int, int]


class Paragraph(SizedByTheLayout, DrawsRowsOnce, RepaintsFromALine, MarkdownParagraph):
    _finished: tuple[FinishedParagraph, ...] = ()
    """The paragraphs before this one that it draws above its own text,
    first to last: begun while the reply streamed (`take_in`)."""
    _finished_text: Content = Content()
    """Their text, as drawn: each one's words and the gap after it."""
    _lines_drawn = 0
    """Lines the text took when it was last set (its wrapped height)."""
    _wrap: GrowingWrap | None = None
    """Its rows, kept from one delivery to the next (made on first need)."""

    def _rows(self, content: Content, width: int) -> list[Row] | None:
        """While the reply streams, the rows the text wraps to, wrapped
        again from the last row when words were added at the end
        (`GrowingWrap`): as Textual wraps a paragraph's text, where it is
        styled as paragraphs are by default (wrapped at words, a word too
        long cut, aligned left, no tabs). A paragraph that does not grow
        is drawn by Textual, in one piece (cheaper than row by row), but
        for one that streamed, at its text and width then: its rows are
        drawn already (at the reply's end, the paragraph that drew the
        reply's paragraphs is every row of it: 1.6 ms for 12 rows drawn
        again here)."""
        styles = self.styles
        wrap = self._wrap
        if not in_streaming_answer(self) and not (wrap and wrap.holds(content, width)):
            self._wrap = None
            return None
        if (
            not width
            or styles.text_wrap != "wrap"
            or styles.text_overflow != "fold"
            or styles.line_pad
            or styles.text_align not in ("left", "start")
            or "\t" in content.plain
        ):
            return None
        if self._wrap is None:
            self._wrap = GrowingWrap()
        return self._wrap.rows(content, width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        visual = self._render()
        rows = self._rows(visual, width) if isinstance(visual, Content) else None
        if rows is None:
            return super().get_content_height(container, viewport, width)
        return len(rows)

    def set_content(self, content: Content) -> None:
        """New text for the paragraph (a streamed reply's last one grows with
        each delivery); the screen is laid out again only when its height
        changes (its width is its container's, whatever the text). Any layout
        in Textual arranges every widget on the screen and draws all of it
        again, while a delivery that only fills the last line needs no more
        than this paragraph redrawn. While the reply streams, a paragraph
        that needs a line more takes STREAM_RESERVE_LINES more: its next
        lines fill blank lines already laid out; and only the rows from
        the first one the new words changed down are drawn again
        (`_repaint_from`)."""
        old = self._content
        self._content = content
        width, height = self.content_size
        streaming = bool(width) and in_streaming_answer(self)
        if streaming and self._lines_drawn:
            # Words added after the text wrap from its last row on: the
            # rows above it are as they were drawn (GrowingWrap says how
            # many; none when the words before changed).
            rows = self._rows(content, width)
            if rows is not None and self._wrap is not None:
                # Down to the text's last row: words only added, the rows
                # below it are the reserve's, blank as they were drawn.
                self._repaint_lines(self._wrap.kept or None, len(rows))
            elif appended_to(old, content):
                self._repaint_lines(self._lines_drawn - 1)
        self.update(content, layout=False)
        self._repaint_lines(None)
        if not width:
            # Not laid out yet (a paragraph built to be mounted, a reply's
            # next one, or mounted with its layout still to come): the
            # layout its mount asks for lays it out with its text; asked
            # here too, it was a second layout of the whole screen. Laid
            # out at no width, it is no lines tall whatever its text.
            return
        needed = self.get_content_height(self.size, self.size, width)
        self._lines_drawn = needed
        if needed == height or (needed < height and streaming):
            return
        reserve = STREAM_RESERVE_LINES if streaming and needed > height else 0
        self.styles.min_height = needed + reserve if reserve else None
        self.refresh(layout=True)

    def end_reserve(self) -> None:
        """No longer the reply's last block: as tall as its text."""
        if self.styles.min_height is not None:
            self.styles.min_height = None

    def take_in(self, finished: Iterable[FinishedParagraph], token: Token, inline: Token) -> None:
        """A new paragraph began after this one while the reply streams:
        this one draws it below what it drew, and the ones before it,
        finished, above it (each followed by the blank row a paragraph's
        margin leaves). A new paragraph widget was mounted for each, and
        the screen laid out again (5-15 ms here, more as the conversation
        grows; docs/performance.md, "A reply's paragraphs stream in one
        widget"); drawn here it is two rows more, which the paragraph's
        reserve often has. The rows are what the widgets draw: Markdown's
        paragraphs are text with a blank row of margin under each, on the
        answer's background. They stay drawn here when the reply ends
        (`ReplyMarkdown.settle`), and get widgets of their own when a block
        of another kind follows (`give_back_finished`). The paragraph's
        text (`_content`) is what it draws: theirs, then its own."""
        self._finished += tuple(finished)
        self._finished_text = Content("").join(
            [part for done in self._finished for part in (done.content, PARAGRAPH_GAP)]
        )
        self._token = token
        self._inline_token = inline
        self.set_content(self._finished_text + self._token_to_content(inline))

    def give_back_finished(self) -> list[Paragraph]:
        """The paragraphs this one drew above its text, each a paragraph
        widget as Markdown builds it (to be mounted before this one), and
        this one draws its own text alone."""
        finished, self._finished = self._finished, ()
        if not finished:
            return []
        own = self._content[len(self._finished_text) :]
        self._finished_text = Content()
        self._wrap = None
        self.set_content(own)
        markdown = self._markdown
        widgets = []
        for done in finished:
            paragraph = Paragraph(markdown, done.token, source_range=done.source_range)
            paragraph._inline_token = done.inline
            paragraph.set_content(done.content)
            widgets.append(paragraph)
        return widgets


class ReplyMarkdown(SizedByTheLayout, DrawnAgainByTheLayout, Markdown):
    BLOCKS = {
        **Markdown.BLOCKS,
        "paragraph_open": Paragraph,
        "fence": CopyableFence,
        "code_block": CopyableFence,
    }

    streaming = False
    """A reply streams into this answer (from its view's `start_stream` to
    its `finish`). An attribute, not a CSS class: no style depends on it, and
    a class added or removed restyles the view and everything in it (5-10 ms
    for a reply of ten paragraphs, at its end; docs/performance.md, "the
    reply's end")."""

    def mount_all(self, widgets: Iterable[Widget], **kwargs: Any) -> AwaitMount:
        # A block follows: the block that was last ends its reserve, in the
        # layout that the new block needs anyway.
        for child in self.children:
            if isinstance(child, (Paragraph, CopyableFence)):
                child.end_reserve()
        widgets = list(widgets)
        last = widgets[-1] if widgets else None
        if isinstance(last, Paragraph) and is_streaming_answer(self):
            # A new paragraph in a streaming reply comes with its reserve
            # already (in the layout that mounts it): its first lines then
            # need no layout of their own.
            last.styles.min_height = 1 + STREAM_RESERVE_LINES
        return super().mount_all(widgets, **kwargs)

    _first_paragraph_composed = False
    """The answer of a reply that starts to stream was composed with its
    first paragraph (`compose`): the update its mount asks for has nothing
    to build."""

    def compose(self) -> ComposeResult:
        """A reply that starts to stream comes with its first paragraph,
        empty, and the paragraph's reserve: mounted and laid out with the
        reply's view, so that the first words need no mount and no layout
        of their own (6 ms of the UI thread at the first reply here, 15 at
        the 40th; docs/performance.md, "The first paragraph comes with the
        reply"). Text that does not begin as a paragraph (a heading, a code
        block) replaces it, as any last block is replaced."""
        if self._initial_markdown or not is_streaming_answer(self):
            return
        from markdown_it.token import Token

        # What Markdown builds a paragraph from (its first token); its
        # words and place come with the first parse (`_append_in_place`).
        # Its reserve is set as it mounts (`mount_all`), as any new paragraph's.
        paragraph = Paragraph(self, Token("paragraph_open", "p", 1), source_range=(0, 0))
        self._first_paragraph_composed = True
        yield paragraph

    def update(self, markdown: str) -> AwaitComplete:
        if self._first_paragraph_composed:
            # The update Markdown's mount asks for, of no text: its blocks
            # are none, and the first paragraph stays for the first words.
            self._first_paragraph_composed = False
            if not markdown:
                self._theme = self.app.theme
                self._markdown = ""
                return AwaitComplete.nothing()
        return super().update(markdown)

    async def drop_first_paragraph(self) -> None:
        """Something else comes first (thinking, a tool call): the empty
        first paragraph goes (its reserve would stand under it), and the
        answer's first words mount their own, as any new block is mounted."""
        blocks = self.children
        if len(blocks) == 1 and not self.source and isinstance(blocks[0], Paragraph):
            await blocks[0].remove()

    def layout_draws_its_changes(self) -> bool:
        # While the answer streams: a block mounted at its end draws the
        # same answer with a block more (its blocks are in front of it).
        return is_streaming_answer(self)

    _parsed_paragraph: Paragraph | None = None
    """The last block, when the text from its first line on was last
    parsed as that one paragraph: plain words added to it need no parse
    (`words_added`)."""

    _fence_at: tuple[CopyableFence, int] | None = None
    """The last block, a fenced code block, and where its source starts,
    when the text from there on was last parsed as that block: code added
    to it may need no parse (`grown_fence`)."""

    def append(self, markdown: str) -> AwaitComplete:
        if is_streaming_answer(self) and self._append_in_place(markdown):
            return AwaitComplete.nothing()
        self._parsed_paragraph = None
        # Markdown's own append updates the last block from a parse of its
        # own text on: the paragraphs it drew above that get their widgets.
        self._mount_finished_paragraphs()
        return super().append(markdown)

    def _mount_finished_paragraphs(self) -> None:
        """The paragraphs the last one drew above its text (`Paragraph.take_in`),
        mounted before it, each as Markdown builds it: the blocks are
        Markdown's again."""
        blocks = self.children
        last = blocks[-1] if blocks else None
        if isinstance(last, Paragraph):
            finished = last.give_back_finished()
            if finished:
                # Markdown's own mount: no reserve to end or take (`mount_all`).
                Markdown.mount_all(self, finished, before=last)

    def _append_in_place(self, markdown: str) -> bool:
        """Most deliveries of a streaming reply only add words to its last
        paragraph. Markdown's own append builds a new paragraph widget from
        the text parsed again and copies its text into the last one (a
        widget made and thrown away at each delivery); this sets the
        paragraph's text directly when the text parsed again is still that
        one paragraph, and says whether it did. Anything else (a new
        block, a list, a closing fence) goes Markdown's own way."""
        blocks = self.children
        last = blocks[-1] if blocks else None
        if not isinstance(last, (Paragraph, CopyableFence)) or self.lock.is_locked:
            return False
        fence = self._fence_at
        if fence and fence[0] is last and self._grow_code_unparsed(*fence, markdown):
            return True
        self._fence_at = None
        if last is self._parsed_paragraph:
            added = words_added(self.source, markdown)
            if added is not None:
                # Plain words at the paragraph's end: its text is what a
                # parse gives, without the parse (chat.ui.widgets.plain_words).
                self._markdown = self.source + markdown
                if added:
                    last.set_content(last._content + added)
                return True
        source = self.source + markdown
        start_line = self._last_parsed_line
        block = "".join(source.splitlines(keepends=True)[start_line:])
        tokens = markdown_parser().parse(block)
        if isinstance(last, CopyableFence):
            return self._grow_code_in_place(last, source, block, start_line, tokens)
        kinds = [token.type for token in tokens]
        count = len(kinds) // 3
        if not count or kinds != ["paragraph_open", "inline", "paragraph_close"] * count:
            return False
        opened, inlines = tokens[0::3], tokens[1::3]
        places = [token.map for token in opened if token.map is not None]
        if len(places) != count or places[0][0] != 0:
            return False
        if count > 1 and len(last._content.plain) + len(block) > RUN_MAX_CHARS:
            return False  # Markdown mounts the new paragraph
        self._markdown = source
        ranges = [(start_line + first, start_line + end) for first, end in places]
        last.source_range = ranges[-1]
        if count > 1:
            # A paragraph began after the last one: it draws the new one
            # (Paragraph.take_in), and the text is parsed from its first
            # line on next, as Markdown's append parses from the last block's.
            self._last_parsed_line = ranges[-1][0]
            last.take_in(
                [
                    FinishedParagraph(token, inline, last._token_to_content(inline), place)
                    for token, inline, place in zip(
                        opened[:-1], inlines[:-1], ranges[:-1], strict=True
                    )
                ],
                opened[-1],
                inlines[-1],
            )
        else:
            last._token = opened[0]
            last._inline_token = inlines[0]
            last.set_content(last._finished_text + last._token_to_content(inlines[0]))
        self._parsed_paragraph = last
        return True

    def _grow_code_in_place(
        self,
        last: CopyableFence,
        source: str,
        block: str,
        start_line: int,
        tokens: list[Token],
    ) -> bool:
        """As for a paragraph: a delivery that only adds code to the
        answer's last block, a code block, sets its code in place (Markdown
        builds a new block, highlighting all of its code, to copy from).
        `block`: the text from the block's first line on, as parsed into
        `tokens`."""
        if len(tokens) != 1:
            return False
        (token,) = tokens
        if (
            token.type != last._token.type
            or token.info != last._token.info
            or token.map is None
            or token.map[0] != 0
        ):
            return False
        self._markdown = source
        last.source_range = (start_line, start_line + token.map[1])
        last._token = token
        last.grow(token.content.rstrip())
        if token.type == "fence":
            self._fence_at = (last, len(source) - len(block))
        return True

    def _grow_code_unparsed(self, last: CopyableFence, at: int, markdown: str) -> bool:
        """Code added to the streaming code block, set without a parse
        where the addition cannot end the block
        (chat.ui.widgets.fence_growth)."""
        grown = grown_fence(self.source[at:], markdown)
        if grown is None:
            return False
        self._markdown = self.source + markdown
        start_line = last.source_range[0]
        last.source_range = (start_line, start_line + grown.lines)
        last.grow(grown.code.rstrip())
        return True

    def settle(self, markdown: str) -> bool:
        """The reply ended, its text `markdown`. When that is the text
        streamed and the blocks are those Markdown builds from the whole
        text, they stay: the last one ends its reserve, a code block there
        is highlighted whole. Else False, and nothing changed (the caller
        builds the blocks again from the whole text: 25 ms for a reply of a
        dozen blocks here, 70 ms for three dozen, and a layout of all of
        them; docs/performance.md, "The answer's blocks stay when the
        reply ends").

        Each block was built from a parse of the text from its first line
        on, as Markdown's append does, so it is what a parse of the whole
        text builds when the two parses split the text into the same
        blocks (kinds and lines), and no link reference definition lets
        one block change the words of another."""
        blocks = list(self.children)
        if markdown != self.source or self.lock.is_locked or not blocks:
            return False
        env: dict[str, Any] = {}
        tokens = markdown_parser().parse(markdown, env)
        if env.get("references"):
            return False
        # The first token of each block of the whole text, in order.
        firsts = [
            token
            for token in tokens
            if token.level == 0 and token.nesting >= 0 and token.map is not None
        ]
        # Each block's kind and lines; a paragraph that draws the ones
        # before it (`Paragraph.take_in`) stands for them too, and keeps
        # drawing them: the rows are the same, and giving them widgets of
        # their own now was a mount and two layouts more.
        shown: list[tuple[MarkdownBlock, str, tuple[int, int]]] = []
        for block in blocks:
            if not isinstance(block, MarkdownBlock):
                return False
            if isinstance(block, Paragraph):
                shown += [(block, "paragraph_open", done.source_range) for done in block._finished]
            shown.append((block, block._token.type, block.source_range))
        if len(firsts) != len(shown) or any(t.type not in SETTLED_KINDS for t in firsts):
            return False
        for (block, kind, lines), token in zip(shown, firsts, strict=True):
            if kind != token.type or list(lines) != token.map:
                return False
            if isinstance(block, CopyableFence) and block.code != token.content.rstrip():
                return False  # Markdown's append copies a code block's colours, not its code
        last = blocks[-1]
        self._fence_at = None  # a continuation parses its first addition
        if isinstance(last, CopyableFence):
            last.highlight_whole()
        if isinstance(last, (Paragraph, CopyableFence)):
            last.end_reserve()
        # As Markdown's update ends: who waits for a reply drawn whole (find) hears it.
        self._table_of_contents = None
        self.post_message(
            Markdown.TableOfContentsUpdated(self, self.table_of_contents).set_sender(self)
        )
        return True
