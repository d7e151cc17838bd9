"""One message of the conversation: a header line and the text.

Replies are untrusted: they are shown by a `Markdown` widget (which never
interprets Rich markup) with `open_links=False`, so a link opens only after
the user confirms. The user's own text is shown as plain text.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message as TextualMessage
from textual.widgets import Static

from chat.conversations.conversation import FINISH_WORDS, STATE_NOTES, Message, ReplyStats
from chat.sanitize import sanitize
from chat.ui.code_highlighting import block_language
from chat.ui.widgets.code_lines import grown, key, with_new_lines_highlighted
from chat.ui.widgets.fence_growth import grown_fence
from chat.ui.widgets.growing_wrap import GrowingWrap, Row, RowKey, appended_to
from chat.ui.widgets.plain_words import words_added
from chat.ui.widgets.sized_by_layout import DrawnAgainByTheLayout, SizedByTheLayout, WidgetMixin
from chat.ui.widgets.thinking_block import ThinkingBlock
from chat.ui.widgets.tool_call_block import ToolSteps
from chat.wording import counted

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token
    from textual.visual import VisualType
    from textual.widget import AwaitMount, Widget
    from textual.widgets import Markdown
    from typing_extensions import Self

FINISH_NOTES = {**FINISH_WORDS, "done": ""}
"""A reply's header and the status bar say how a reply ended unless it ended as it should."""
NO_ANSWER = "no answer: the model ended its turn while thinking"


def reply_summary(stats: ReplyStats) -> str:
    """`212 tokens · 81.3 tok/s · first token 0.21 s · seed 42`; a reply that
    thought first also gives its answer's first token (`first answer 3.40 s`)."""
    answer = "" if stats.first_answer_s is None else f" · first answer {stats.first_answer_s:.2f} s"
    return (
        f"{counted(stats.generated_tokens, 'token')} · {stats.decode_tps:.1f} tok/s · "
        f"first token {stats.ttft_s:.2f} s{answer} · seed {stats.seed}"
    )


def cache_summary(stats: ReplyStats) -> str:
    """What the KV cache saved this turn, from the engine's measured figures."""
    return (
        f"sent {stats.prompt_tokens:,} · reused from cache {stats.prompt_reused:,} · "
        f"evaluated {stats.prompt_evaluated:,} · generated {stats.generated_tokens:,}"
    )


def same_content(shown: object, text: Content) -> bool:
    """Whether a widget showing `shown` already shows `text`. Every message's
    header and branch switch are set again after each turn; an update, even
    to the same text, lays out the message and the whole conversation again
    (about 30 such layouts requested a turn at the 40th reply; docs/performance.md,
    "Headers set to what they show")."""
    return isinstance(shown, Content) and key(shown) == key(text)


class BranchSwitch(Static):
    """`‹ 2/3 ›` beside a message that has alternatives (an edited message, a
    regenerated reply): which one is shown. A click on its left half shows the
    previous one, on its right half the next."""

    DEFAULT_CSS = """
    BranchSwitch {
        width: auto;
        height: 1;
        padding: 0 0 0 1;
        color: $text-muted;
        display: none;
    }
    BranchSwitch:hover {
        color: $text;
        background: $boost;
    }
    """

    @dataclass
    class Clicked(TextualMessage):
        """Show the previous (`step` -1) or next (+1) alternative of `message`."""

        message: Message
        step: int

    def __init__(self, message: Message) -> None:
        super().__init__("", markup=False)
        self.message = message

    def show_position(self, position: int, count: int) -> None:
        """`position` is 1-based; with one alternative only, nothing is shown."""
        self.display = count > 1
        text = Content(f"‹ {position}/{count} ›")
        if not same_content(self.content, text):
            # Hidden, its text takes no room: no layout (one of the whole
            # screen at each reply's start, for a switch no one sees).
            self.update(text, layout=self.display)

    def on_click(self, event: events.Click) -> None:
        event.stop()
        step = -1 if event.x < self.size.width / 2 else 1
        self.post_message(self.Clicked(self.message, step))


class CopyButton(Static):
    """`⧉ copy`: copies a message (at the right of its header, shown while the
    pointer is over it or it is selected: app.tcss) or a code block (above it)."""

    DEFAULT_CSS = """
    CopyButton {
        width: auto;
        height: 1;
        padding: 0 1;
        color: $text-muted;
    }
    CopyButton:hover {
        color: $text;
        background: $boost;
    }
    CopyButton.fence-copy {
        dock: top;
        width: 100%;
        content-align: right top;
    }
    """

    @dataclass
    class Pressed(TextualMessage):
        """Copy `text()` (read at the click: a reply may still be streaming);
        `what` names it in the message that says it was copied."""

        text: Callable[[], str]
        what: str

    def __init__(self, text: Callable[[], str], what: str, classes: str) -> None:
        super().__init__(Content("⧉ copy"), markup=False, classes=classes)
        self._text = text
        self._what = what

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.post_message(self.Pressed(self._text, self._what))


class MessageHeaderRow(SizedByTheLayout, Horizontal):
    """A message's header line: who, and for a reply its figures; the branch
    switch and the copy button beside them."""


class MessageHeader(SizedByTheLayout, Static):
    """The header's text (`MessageView.header_text`)."""


class UserMessageBody(SizedByTheLayout, Static):
    """The text of the user's message (or the system prompt), as typed."""


class MessageView(SizedByTheLayout, Vertical):
    """Base view: a header, and a body that subclasses provide."""

    streaming = False
    """A reply streams into this view (from `start_stream` to `finish`). An
    attribute, not a CSS class: no style depends on it, and a class added or
    removed restyles the view and everything in it (5-10 ms for a reply of
    ten paragraphs, at its end; docs/performance.md, "the reply's end")."""

    @dataclass
    class Selected(TextualMessage):
        """The user clicked `view`: it is the message the next action applies to."""

        view: MessageView

    def __init__(self, message: Message) -> None:
        super().__init__(classes=f"message {message.role}")
        self.message = message
        self.outside_window = False
        self._branch: tuple[int, int] = (1, 1)

    def compose(self) -> ComposeResult:
        with MessageHeaderRow(classes="message-header-row"):
            header = MessageHeader(self.header_text(), classes="message-header", markup=False)
            header.set_class(self.ended_early(), "ended-early")
            yield header
            switch = BranchSwitch(self.message)
            switch.show_position(*self._branch)
            yield switch

    def _content(self) -> str:
        return self.message.content

    def ended_early(self) -> bool:
        """Whether the header is a warning: the reply ended before the model finished."""
        return False

    def what(self) -> str:
        """The message in words, for "Copied the reply"."""
        return "the reply" if self.message.role == "assistant" else "your message"

    def show_branch(self, position: int, count: int) -> None:
        """Which of its alternatives this message is (1-based), of how many."""
        self._branch = (position, count)
        for switch in self.query(BranchSwitch):
            switch.show_position(position, count)

    def on_click(self) -> None:
        self.post_message(self.Selected(self))

    # `pointer-over`: the pointer is over the message or any part of it (the
    # :hover pseudo-class is only on the part right under it): the copy button
    # shows then (app.tcss). Enter and Leave bubble up from the parts.

    def on_enter(self) -> None:
        self.add_class("pointer-over")
        self.show_copy_button()

    def show_copy_button(self) -> None:
        """Mount the copy button on first need (the pointer comes over the
        message, or it is selected): opening a long conversation does not pay
        for a widget per message that most never show."""
        if self.message.role == "system" or self.query(".message-copy"):
            return
        for row in self.query(".message-header-row").results(Horizontal):  # none while removed
            row.mount(CopyButton(self._content, self.what(), classes="message-copy"))

    def on_leave(self) -> None:
        # From one part to another, the pointer is still over the message.
        self.call_later(self._follow_pointer)

    def _follow_pointer(self) -> None:
        self.set_class(self.is_mouse_over, "pointer-over")

    def header_text(self) -> Content:
        role = {"user": "You", "assistant": "Assistant", "system": "System prompt"}[
            self.message.role
        ]
        parts = [role]
        if self.message.token_count is not None:
            parts.append(counted(self.message.token_count, "token"))
        stats = self.message.stats
        if stats is not None:
            parts = [role, reply_summary(stats), cache_summary(stats)]
            note = FINISH_NOTES[stats.finish_reason]
            if note:
                parts.append(f"[{note}]")
            elif self.message.thinking and not self.message.content.strip():
                # Folded, the thinking alone looks like a reply that broke.
                parts.append(f"[{NO_ANSWER}]")
        if self.message.state != "complete":
            parts.append(f"[{STATE_NOTES[self.message.state]}]")
        if self.outside_window:
            parts.append("[outside the window: not sent]")
        return Content(" · ".join(parts))

    def show_outside_window(self, outside: bool) -> None:
        self.outside_window = outside
        self.set_class(outside, "outside-window")
        self.refresh_header()

    def refresh_header(self) -> None:
        # A view just mounted may not be composed yet (a model that finishes
        # loading while a conversation opens recounts it): compose then draws
        # the header from the same state.
        text = self.header_text()
        ended_early = self.ended_early()
        for header in self.query(".message-header").results(Static):
            if not same_content(header.content, text):
                header.update(text)
            # On the header, not the view: a class on the view restyles it and
            # everything in it (15 ms at the end of a reply of 300 tokens cut
            # short, measured), and only the header's colour depends on it.
            header.set_class(ended_early, "ended-early")


class UserMessageView(MessageView):
    def compose(self) -> ComposeResult:
        yield from super().compose()
        # sanitize: a saved or imported message may hold escape sequences.
        yield UserMessageBody(
            Content(sanitize(self.message.content)), classes="message-body", markup=False
        )
        if self.message.attachments:
            # The names only: the files' text is sent to the model, not shown.
            names = "  ".join(f"📎 {sanitize(a.name)}" for a in self.message.attachments)
            yield Static(Content(names), classes="message-attachments", markup=False)


class SystemMessageView(UserMessageView):
    """The system prompt, shown once at the top of the conversation."""


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


@functools.cache
def markdown_parser() -> MarkdownIt:
    """One parser for every reply. Markdown's default builds a new one for each
    update and append, many times a second while a reply streams
    (docs/performance.md). A parser keeps no state between documents."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("gfm-like")  # what Markdown uses by default
    # Markdown parses in a thread pool, several replies at once when a
    # conversation opens; markdown-it builds its rule lists on first use, and a
    # thread that reads them half built fails ("none of the block rules
    # matched"). Built here, once, they are only read from then on.
    parser.parse("*x*")
    return parser


@functools.cache
def _reply_markdown_class() -> type[Markdown]:
    """Markdown whose code blocks each carry a copy button. Built on first use:
    importing Markdown costs time that a new chat's first frame need not pay."""
    from textual.await_complete import AwaitComplete
    from textual.strip import Strip
    from textual.visual import Visual
    from textual.widget import _RenderCache  # Textual's own; see CodeLabel
    from textual.widgets import Label, Markdown
    from textual.widgets._markdown import MarkdownParagraph  # not re-exported by textual 8
    from textual.widgets.markdown import MarkdownBlock, MarkdownFence

    def is_streaming_answer(body: object) -> bool:
        """`body` is the answer of a reply that streams."""
        view = body.parent if isinstance(body, ReplyMarkdown) else None
        return isinstance(view, MessageView) and view.streaming

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
        def highlight(
            cls, code: str, language: str, ansi: bool = False, dark: bool = False
        ) -> Content:
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

    class Paragraph(SizedByTheLayout, DrawsRowsOnce, RepaintsFromALine, MarkdownParagraph):
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
            is drawn by Textual, in one piece (cheaper than row by row)."""
            styles = self.styles
            if not in_streaming_answer(self):
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

    class ReplyMarkdown(SizedByTheLayout, DrawnAgainByTheLayout, Markdown):
        BLOCKS = {
            **Markdown.BLOCKS,
            "paragraph_open": Paragraph,
            "fence": CopyableFence,
            "code_block": CopyableFence,
        }

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
            return super().append(markdown)

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
            if kinds != ["paragraph_open", "inline", "paragraph_close"]:
                return False
            opened, inline = tokens[0], tokens[1]
            if opened.map is None or opened.map[0] != 0:
                return False
            self._markdown = source
            last.source_range = (start_line, start_line + opened.map[1])
            last._token = opened
            last._inline_token = inline
            last.set_content(last._token_to_content(inline))
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
            if len(firsts) != len(blocks) or any(t.type not in SETTLED_KINDS for t in firsts):
                return False
            for block, token in zip(blocks, firsts, strict=True):
                if not isinstance(block, MarkdownBlock):
                    return False
                if block._token.type != token.type or list(block.source_range) != token.map:
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

    return ReplyMarkdown


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


class AssistantMessageView(MessageView):
    show_thinking = False
    """Whether a reply's thinking starts unfolded (`ui.show_thinking`; the app sets it)."""

    def __init__(self, message: Message) -> None:
        super().__init__(message)
        stats = message.stats
        self.thinking = ThinkingBlock(
            message.thinking,
            stats.thinking_tokens if stats is not None else 0,
            _thinking_seconds(stats),
            folded=not self.show_thinking,
        )
        """Above the answer (held here: a streamed chunk need not look it up)."""
        self.body: Markdown = _reply_markdown_class()(
            sanitize(message.content),
            classes="message-body",
            open_links=False,
            parser_factory=markdown_parser,
        )
        """The answer (held, as the thinking is: each delivery goes to it)."""

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield self.thinking
        if self.message.tool_steps:
            yield ToolSteps(self.message.tool_steps)
        yield self.body

    def ended_early(self) -> bool:
        return _ended_early(self.message)

    def start_stream(self) -> None:
        self.streaming = True  # the answer grows with each delivery, until `finish`

    async def append(self, text: str, thinking: str = "", thinking_tokens: int = 0) -> None:
        """Add streamed text (and thinking). Appended here, not through
        Textual's MarkdownStream (a task of its own): the text then reaches
        the screen in the same frame as the meter's change that came with it.
        Deliveries the screen has not drawn yet are joined before they come
        here (chat.ui.turn_drawer), as the stream would join them."""
        if thinking or thinking_tokens:
            self.thinking.add(thinking, thinking_tokens)
            await self.body.drop_first_paragraph()  # type: ignore[attr-defined]
        if text and self.streaming:
            block = self.thinking
            if block.thinking_now:
                block.answer_began()
            await self.body.append(text)

    async def tool_steps(self) -> ToolSteps:
        """The reply's tool steps, mounted above the answer on first need."""
        found = self.query(ToolSteps)
        if found:
            return found.first()
        steps = ToolSteps()
        await self.mount(steps, before=self.body)
        # A call before any words: the empty first paragraph's reserve would
        # stand under the call while the user decides on it.
        await self.body.drop_first_paragraph()  # type: ignore[attr-defined]
        return steps

    async def restart_body(self) -> None:
        """A tool step ended: its text is shown above its calls (`ToolSteps`),
        and the next step's text streams into an empty answer."""
        await self.body.update("")

    async def finish(self, text: str, stats: ReplyStats | None, thinking: str = "") -> None:
        """Stop streaming and render the final text once, in full."""
        self.streaming = False
        self.message.content = text
        self.message.stats = stats
        self.message.thinking = thinking
        self.thinking.finish(
            thinking, stats.thinking_tokens if stats is not None else 0, _thinking_seconds(stats)
        )
        # The answer is a ReplyMarkdown (its class is built on first use, so
        # the type checker knows it as Markdown): its blocks stay when they
        # are what the whole text builds.
        if not self.body.settle(text):  # type: ignore[attr-defined]
            await self.body.update(text)
        self.refresh_header()


def _thinking_seconds(stats: ReplyStats | None) -> float | None:
    """How long the reply thought: from its first token to its answer's, or to
    its end when it ended thinking (stopped, or out of tokens mid-thought)."""
    if stats is None:
        return None
    if stats.first_answer_s is not None:
        return max(0.0, stats.first_answer_s - stats.ttft_s)
    if stats.thinking_tokens and stats.total_s > stats.ttft_s:
        return stats.total_s - stats.ttft_s
    return None


def _ended_early(reply: Message) -> bool:
    """Whether the reply's header is a warning: it ended before the model finished."""
    if reply.state == "interrupted":
        return True
    return reply.stats is not None and reply.stats.finish_reason != "done"


class WaitingMessage(Vertical):
    """A message sent while the model loads: shown, not yet in the conversation.
    The chat screen sends it once the model is ready (Esc takes it back)."""

    def __init__(self, text: str) -> None:
        super().__init__(classes="message user waiting")
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(
            Content("You · waiting for the model to load… Esc takes it back"),
            classes="message-header",
            markup=False,
        )
        yield Static(Content(sanitize(self.text)), classes="message-body", markup=False)


def view_for(message: Message) -> MessageView:
    if message.role == "assistant":
        return AssistantMessageView(message)
    if message.role == "system":
        return SystemMessageView(message)
    return UserMessageView(message)
