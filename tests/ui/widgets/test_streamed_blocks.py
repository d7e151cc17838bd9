"""A streamed reply's growing blocks redraw without laying out the screen
unless their size changes, and end up exactly as a reply shown whole."""

from __future__ import annotations

import math

import pytest
from textual.content import Content
from textual.dom import DOMNode
from textual.widget import Widget
from textual.widgets import Label

from chat.ui.widgets.message_view import AssistantMessageView
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, replied, send

WIDE = "WIDE = '" + "w" * 110 + "'"  # wider than the screen: the block scrolls
CODE_LINES = [
    "def add(a, b):",
    WIDE,
    "    return a + b  # then lines narrower than the wide one",
    "",
    "print(add(1, 2))  # each takes several deliveries to stream",
]
REPLY = "Here it is:\n\n```python\n" + "\n".join(CODE_LINES) + "\n```\n"


def streaming_views(node: DOMNode) -> list[AssistantMessageView]:
    """The reply views under `node` that a reply streams into."""
    return [view for view in node.query(AssistantMessageView) if view.streaming]


def token_pieces(text: str) -> list[str]:
    return [text[i : i + 2] for i in range(0, len(text), 2)]


def drawn_as_fresh(widget: Widget) -> bool:
    """Each of `widget`'s lines as the screen last drew them is what a fresh
    render draws (asserted); False when it has not been drawn yet."""
    from textual._styles_cache import StylesCache
    from textual.geometry import Region

    width, height = widget.outer_size
    if not (width and height and widget._styles_cache._cache):
        return False
    crop = Region(0, 0, width, height)
    drawn = widget._styles_cache.render_widget(widget, crop)
    fresh = StylesCache().render_widget(widget, crop)
    assert [list(line) for line in drawn] == [list(line) for line in fresh]
    return True


async def test_a_streamed_code_block_lays_out_only_when_it_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code_updates: list[bool] = []  # each update of a code block's text: laid out?
    update = Label.update

    def spy(self: Label, content: object = "", *, layout: bool = True) -> None:
        if self.id == "code-content":
            code_updates.append(layout)
        update(self, content, layout=layout)  # type: ignore[arg-type]

    monkeypatch.setattr(Label, "update", spy)
    engine = ScriptedEngine(replies=[token_pieces(REPLY)], delay=0.02)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await replied(app, pilot, "code please")
        streamed = app.query(AssistantMessageView).last()
        code = streamed.query_one("#code-content", Label)
        # Every line and every column of the code is shown.
        assert code.content_size.height == len(CODE_LINES)
        assert code.content_size.width == len(WIDE)
        # The same reply shown whole (as when a conversation is reopened).
        whole = AssistantMessageView(screen.conversation.messages[-1])
        await streamed.parent.mount(whole)  # type: ignore[union-attr]
        await pilot.pause()
        assert whole.query_one("#code-content", Label).size == code.size
    # Laid out when a line was added or the widest line widened, not when
    # the lines after the wide one grew.
    layouts = code_updates.count(True)
    assert code_updates.count(False) >= 5
    assert layouts <= len(CODE_LINES) + (len(WIDE) + len(CODE_LINES[0])) // 2 + 1


def test_label_widths_are_measured_as_textual_measures_them() -> None:
    from textual.content import Content

    from chat.ui.widgets.reply_markdown import _text_shape

    text = "ab\n\t你好\nxyz"
    rules = Widget().styles
    assert _text_shape(text) == (3, Content(text).get_optimal_width(rules, 80))


PROSE = " ".join(f"Sentence {n} of a long paragraph that wraps over many lines." for n in range(40))


async def test_a_streamed_paragraph_lays_out_once_for_several_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The streaming paragraph takes STREAM_RESERVE_LINES blank lines ahead of
    its text, so the screen is laid out once for those lines, not for each;
    at the end the paragraph is as tall as its text, as when shown whole."""
    from chat.ui.widgets.reply_markdown import STREAM_RESERVE_LINES

    # The streaming paragraph's height each time it asked for a layout (once
    # the reply has ended, its view draws it afresh: not counted).
    layouts: list[int] = []
    refresh = Widget.refresh

    def spy(self: Widget, *regions: object, layout: bool = False, **kwargs: object) -> Widget:
        streaming = any(getattr(view, "streaming", False) for view in self.ancestors)
        if layout and streaming and self.is_mounted and type(self).__name__ == "Paragraph":
            layouts.append(self.size.height)
        return refresh(self, *regions, layout=layout, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Widget, "refresh", spy)
    engine = ScriptedEngine(replies=[token_pieces(PROSE)], delay=0.005)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await replied(app, pilot, "a long paragraph please")
        streamed = app.query(AssistantMessageView).last()
        paragraph = streamed.body.children[0]
        lines = paragraph.size.height
        assert lines > 3 * STREAM_RESERVE_LINES  # the text wrapped over many lines
        whole = AssistantMessageView(screen.conversation.messages[-1])
        await streamed.parent.mount(whole)  # type: ignore[union-attr]
        await pilot.pause()
        assert whole.body.children[0].size == paragraph.size
    # Once before it is laid out, once at its first line, then once for each
    # STREAM_RESERVE_LINES + 1 lines (a layout may be asked for by several of
    # its parts, at one height); fewer when a delivery brings several lines.
    heights = sorted(set(layouts))
    assert len(heights) <= 2 + math.ceil((lines - 1) / (STREAM_RESERVE_LINES + 1)), heights


async def test_a_delivery_leaves_the_reserves_blank_lines_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The blank lines a streaming block is laid out with below its text stay
    blank until text fills them: a delivery repaints down to the text's last
    row, not to the block's bottom. What is on screen after every frame is
    checked against Textual's own drawing in tests/ui/test_terminal_scroll.py."""
    from textual.geometry import Region

    repaints: list[tuple[int, int]] = []  # (the region's bottom, the block's height)
    refresh = Widget.refresh

    def spy(self: Widget, *regions: Region, **kwargs: object) -> Widget:
        if regions and type(self).__name__ in ("Paragraph", "CodeLabel"):
            repaints.append((max(region.bottom for region in regions), self.content_size.height))
        return refresh(self, *regions, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Widget, "refresh", spy)
    engine = ScriptedEngine(replies=[token_pieces(PROSE + "\n\n" + REPLY)], delay=0.005)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        await replied(app, pilot, "a paragraph and some code")
    assert len(repaints) > 20
    # Most deliveries stop above the reserve's blank lines.
    assert sum(bottom < height for bottom, height in repaints) > len(repaints) / 2, repaints


STYLED = (
    "The keeper climbed the stairs at dusk and lit the lamp, as every night, "
    "then **wrote in the log that the tide was high** and the wind from the "
    "west; a ship passed *far out* at nine, and `lamp.trim()` was done at ten. "
) * 3


async def test_a_streamed_paragraph_draws_again_only_lines_that_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery repaints the streaming paragraph from its last drawn line
    down; a closing `**` (the words before it turn bold) repaints it all.
    After every frame, each line on screen is what a fresh render draws."""
    from textual.screen import Screen

    checked: list[int] = []
    compositor_refresh = Screen._compositor_refresh

    def check_after_frame(self: Screen[object]) -> None:
        compositor_refresh(self)
        for view in streaming_views(self):
            for paragraph in view.body.children:
                if drawn_as_fresh(paragraph):
                    checked.append(paragraph.outer_size.height)

    monkeypatch.setattr(Screen, "_compositor_refresh", check_after_frame)
    engine = ScriptedEngine(replies=[token_pieces(STYLED)], delay=0.005)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        await replied(app, pilot, "the log, please")
    # Many frames, over several lines. How many frames a reply takes depends on
    # the machine's load (a loaded CI machine drew 20); a handful checks the point.
    assert len(checked) >= 8 and max(checked) > 5


async def test_the_prompt_cursor_stays_lit_while_a_reply_streams() -> None:
    """Each blink would be a frame of its own while the reply streams."""
    from chat.ui.widgets.prompt_box import PromptBox
    from tests.conftest import wait_for

    engine = ScriptedEngine(replies=[token_pieces(PROSE[:600])], delay=0.01)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await ready(app, pilot)
        box = screen.query_one(PromptBox)
        assert box.cursor_blink
        await send(pilot, "a long paragraph please")
        await wait_for(lambda: streaming_views(screen), pilot)
        assert not box.cursor_blink
        await pilot.press("a")  # typing goes on meanwhile
        await turn_done(screen, pilot, 2)
        await pilot.pause()
        assert box.cursor_blink
        assert box.text == "a"


SIX_PARAGRAPHS = [
    f"Paragraph {n}: " + "the keeper logged the tide and the wind. " * 4 for n in range(6)
]
"""Each two or three lines at 100 columns."""


async def test_paragraphs_begun_while_a_reply_streams_are_drawn_by_the_streaming_one() -> None:
    """A paragraph begun while the reply streams is drawn by the streaming
    paragraph, below the one it drew (`Paragraph.take_in`): while the reply
    streams, its answer is one block. When it ends, the answer draws what
    Markdown draws from the whole text, row for row, with the paragraphs
    Markdown builds."""
    from chat.conversations.conversation import Message
    from chat.ui.widgets.conversation_view import ConversationView

    text = "\n\n".join(SIX_PARAGRAPHS)
    # The reply stalls after its first token, so its streaming is seen however
    # slow the machine.
    engine = ScriptedEngine(replies=[token_pieces(text)], delay=0.005, hold_after=1)
    app = make_app(engine)
    blocks_while_streaming: set[int] = set()
    async with app.run_test(size=(100, 80)) as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "six paragraphs please")
        await wait_for(engine.holding.is_set, pilot)
        await wait_for(lambda: streaming_views(screen), pilot)
        streamed = app.query(AssistantMessageView).last()
        engine.release.set()
        while streamed.streaming:
            blocks_while_streaming.add(len(streamed.body.children))
            await pilot.pause(0.01)
        await turn_done(screen, pilot, 2)
        whole = AssistantMessageView(Message("assistant", text))
        await app.query_one(ConversationView).mount(whole)
        await pilot.pause()
        assert blocks_while_streaming == {1}
        assert blocks(streamed) == blocks(whole)
        assert [kind for kind, _, _ in blocks(whole)] == ["Paragraph"] * len(SIX_PARAGRAPHS)
        assert streamed.body.size == whole.body.size
        assert drawn_rows(streamed.body) == drawn_rows(whole.body)


async def test_past_the_run_limit_a_new_paragraph_is_mounted_and_the_answer_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past RUN_MAX_CHARS of text, a new paragraph is mounted as Markdown
    mounts it, and the paragraphs the streaming one drew get their own
    widgets: the answer is Markdown's blocks, drawn as a whole reply."""
    from textual.app import App, ComposeResult

    from chat.conversations.conversation import Message
    from chat.ui.widgets import reply_markdown

    monkeypatch.setattr(reply_markdown, "RUN_MAX_CHARS", 400)  # about two paragraphs

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            view = AssistantMessageView(Message("assistant", ""))
            view.start_stream()
            yield view

    text = "\n\n".join(SIX_PARAGRAPHS)
    most = 0
    async with Host().run_test(size=(100, 60)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        for piece in token_pieces(text):
            await view.append(piece)
            await pilot.pause()
            most = max(most, len(view.body.children))
            drawn_by_one = max(len(block._finished) for block in view.body.children)
            assert drawn_by_one <= 2
        await view.finish(text, None)
        whole = AssistantMessageView(Message("assistant", text))
        await pilot.app.mount(whole)
        await pilot.pause()
        assert most >= 3
        assert blocks(view) == blocks(whole)
        assert drawn_rows(view.body) == drawn_rows(whole.body)


async def test_a_streaming_reply_is_laid_out_only_as_its_rows_pass_the_reserve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paragraph begun while the reply streams was a widget mounted and a
    layout of the whole screen (5-15 ms here); drawn by the streaming
    paragraph it is two rows more, and the screen is laid out only when the
    paragraph's rows pass its reserve: a layout for every
    1 + STREAM_RESERVE_LINES rows at most, fewer than one a paragraph."""
    from textual.screen import Screen

    from chat.ui.widgets.reply_markdown import STREAM_RESERVE_LINES

    layouts = 0  # full layouts while the reply streams, after its first words
    refresh_layout = Screen._refresh_layout

    def counting(self: Screen[object], size: object = None, scroll: bool = False) -> None:
        nonlocal layouts
        full = not (scroll and not self._layout_widgets)
        streaming = streaming_views(self)
        layouts += full and bool(streaming) and bool(streaming[-1].body.source)
        refresh_layout(self, size, scroll)  # type: ignore[arg-type]

    monkeypatch.setattr(Screen, "_refresh_layout", counting)
    engine = ScriptedEngine(replies=[token_pieces("\n\n".join(SIX_PARAGRAPHS))], delay=0.005)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        await replied(app, pilot, "six paragraphs please")
        rows = app.query(AssistantMessageView).last().body.size.height
    assert rows >= 2 * len(SIX_PARAGRAPHS) + 5  # the test's premise: two rows or more each
    assert layouts <= math.ceil(rows / (1 + STREAM_RESERVE_LINES))
    assert layouts < len(SIX_PARAGRAPHS) - 1


def blocks(view: AssistantMessageView) -> list[tuple[str, str, list[object]]]:
    """The answer's blocks, nested ones included: kind, text and styles (a
    code block's by line, as it is drawn: a streaming one keeps its lines).
    A paragraph that draws the ones before it (`Paragraph.take_in`) stands
    for each of them, as the widget Markdown builds for it."""
    shown = []
    for block in view.body.walk_children():
        content = getattr(block, "_content", None)
        finished = getattr(block, "_finished", ())
        for done in finished:
            shown.append((type(block).__name__, done.content.plain, [spans_of(done.content)]))
        if finished:
            content = content[len(block._finished_text) :]
        text = getattr(content, "plain", "")
        pieces = [content] if content else []
        if "Fence" in type(block).__name__ and content:
            pieces = content.split("\n", allow_blank=True)
        shown.append((type(block).__name__, text, [spans_of(piece) for piece in pieces]))
    return shown


def spans_of(content: Content) -> list[object]:
    return [(span.start, span.end, str(span.style)) for span in content.spans]


def drawn_rows(widget: Widget) -> list[list[tuple[str, str]]]:
    """The screen's rows where `widget` is, as drawn: each cell's character
    and style (a blank cell's background only: what shows of it), not the
    places Textual marks in it for selecting."""
    region = widget.region
    strips = widget.screen._compositor.render_strips()[region.y : region.bottom]
    rows = []
    for strip in strips:
        cells = []
        for segment in strip.crop(region.x, region.right):
            style = segment.style
            for char in segment.text:
                blank = char == " " and not (style and (style.underline or style.reverse))
                cells.append((char, str(style.bgcolor if blank and style else style)))
        rows.append(cells)
    return rows


MIXED = (
    "The keeper's **log, in bold once the marks close**, and `code` inline.\n\n"
    "A second paragraph\nwith a soft break and a [link](https://example.com).\n\n"
    "- a list item\n- another, *emphasised*\n\n"
    "## A heading\n\n"
    "```python\nprint('a fence')\nfor line in log:\n    print(line)\n```\n\n"
    "Setext heading\n---\n\n"
    "Links come as words do: example.com, x.org/path; mail me@host.net.  Spaces   run  \n"
    "10) not a list, since only 1 interrupts\n1. and a list after all\n\n"
    "The last paragraph " + "grows word by word. " * 8
)


async def test_words_added_to_the_last_block_are_set_in_place_as_markdown_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery that only adds words to the streaming answer's last paragraph
    (or code to its last code block) sets its text without building a block
    widget to copy from; after every delivery the answer's blocks are those
    Markdown's own append builds from the same deliveries (the code highlighted
    at each one here, as Markdown does)."""
    from textual.app import App, ComposeResult
    from textual.widgets import Markdown

    from chat.conversations.conversation import Message
    from chat.ui.widgets import reply_markdown
    from chat.ui.widgets.plain_words import words_added

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessageView(Message("assistant", ""))
            yield AssistantMessageView(Message("assistant", ""))

    in_place: list[bool] = []
    markdown_class = reply_markdown.ReplyMarkdown
    append_in_place = markdown_class._append_in_place

    def counted(self: Markdown, markdown: str) -> bool:
        done: bool = append_in_place(self, markdown)
        in_place.append(done)
        return done

    monkeypatch.setattr(markdown_class, "_append_in_place", counted)
    monkeypatch.setattr(reply_markdown, "HIGHLIGHT_EVERY_S", 0.0)
    fence_class = markdown_class.BLOCKS["fence"]
    grow = fence_class.grow  # type: ignore[attr-defined]
    grown = 0

    def counted_grow(self: Widget, code: str) -> None:
        nonlocal grown
        grown += 1
        grow(self, code)

    monkeypatch.setattr(fence_class, "grow", counted_grow)
    said: list[bool] = []  # plain words added without a parse?

    def counted_words(source: str, added: str) -> str | None:
        gained = words_added(source, added)
        said.append(gained is not None)
        return gained

    monkeypatch.setattr(reply_markdown, "words_added", counted_words)
    app = Host()
    async with app.run_test(size=(100, 60)) as pilot:
        ours, markdowns = app.query(AssistantMessageView).results()
        for view in (ours, markdowns):
            view.start_stream()
        for start in range(0, len(MIXED), 3):
            piece = MIXED[start : start + 3]
            await ours.body.append(piece)
            await Markdown.append(markdowns.body, piece)  # Textual's own
            await pilot.pause()
            assert blocks(ours) == blocks(markdowns), MIXED[: start + 3]
    assert in_place.count(True) > len(in_place) / 2
    assert in_place.count(False) >= 5  # new blocks went Markdown's own way
    assert grown >= 10  # most of the code block's deliveries
    assert said.count(True) >= 40 and said.count(False) >= 10  # no parse for most words


async def test_a_growing_code_block_is_highlighted_whole_only_now_and_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Highlighting costs the whole code at each delivery (0.13 ms a line of
    Python here): while a code block streams it is highlighted whole at most
    every HIGHLIGHT_EVERY_S, the code added in between drawn in the code's
    plain colour. Every delivery shows all of the code; when the reply ends
    the block is highlighted exactly as Markdown highlights it."""
    from textual.app import App, ComposeResult
    from textual.widgets.markdown import MarkdownFence

    from chat.conversations.conversation import Message
    from chat.ui.widgets import reply_markdown

    monkeypatch.setattr(reply_markdown, "HIGHLIGHT_EVERY_S", 60.0)  # none again while streaming
    highlights = 0
    highlight = MarkdownFence.highlight

    def counted(code: str, language: str, ansi: bool = False, dark: bool = False) -> object:
        nonlocal highlights
        highlights += bool(code)  # not the empty blocks of "```p", "```py"...
        return highlight(code, language, ansi=ansi, dark=dark)

    fence_class = reply_markdown.ReplyMarkdown.BLOCKS["fence"]
    monkeypatch.setattr(fence_class, "highlight", staticmethod(counted))

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessageView(Message("assistant", ""))

    code = "\n".join(CODE_LINES)
    reply = f"```python\n{code}\n```\n\nDone."
    async with Host().run_test(size=(100, 30)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        view.start_stream()
        sent = ""
        for piece in token_pieces(reply[: reply.index("```\n\n")]):
            sent += piece
            await view.append(piece)
            await pilot.pause()
            if sent.startswith("```python\n"):  # the fence's line is complete
                (fence,) = view.body.query(fence_class)
                assert fence._content.plain == sent.removeprefix("```python\n").rstrip()
        assert highlights <= 2  # at its first growth, and one spare
        await view.finish(reply, None)
        await pilot.pause()
        (fence,) = view.body.query(fence_class)
        exact = highlight(code, "python", dark=True)
        assert (fence._content.plain, fence._content.spans) == (exact.plain, exact.spans)


async def test_a_streamed_code_block_draws_what_textual_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A streaming code block's code is drawn a line at a time, keeping the
    lines drawn before, and repainted from its first changed line down. After
    every frame, each of its lines on screen is what Textual's own render of
    the whole code draws."""
    from textual.screen import Screen
    from textual.visual import Visual

    from chat.ui.widgets import reply_markdown

    monkeypatch.setattr(reply_markdown, "HIGHLIGHT_EVERY_S", 0.05)  # highlighted, and not yet
    checked: list[int] = []
    compositor_refresh = Screen._compositor_refresh

    def check_after_frame(self: Screen[object]) -> None:
        compositor_refresh(self)
        for view in streaming_views(self):
            for label in view.body.query("#code-content").results(Label):
                if not drawn_as_fresh(label):
                    continue
                content_width, content_height = label.size
                whole = Visual.to_strips(
                    label, label._render(), content_width, content_height, label.visual_style
                )
                assert [list(line) for line in label._render_cache.lines] == [
                    list(line) for line in whole
                ]
                checked.append(label.outer_size.height)

    monkeypatch.setattr(Screen, "_compositor_refresh", check_after_frame)
    code = "\n".join(CODE_LINES * 3)
    engine = ScriptedEngine(replies=[token_pieces(f"```python\n{code}\n```\n")], delay=0.005)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        await replied(app, pilot, "the code, please")
    assert len(checked) >= 8 and max(checked) > 8


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        (MIXED, True),
        (MIXED + "\n\n```python\nprint('the reply ends in code')\nfor n in range(3):\n", True),
        ("> quoted\n\n1. one\n2. two\n\n***\n\n# Heading\n\nEnd.", True),
        # Markdown's append updates a table's rows in place, in other widgets.
        ("| a | b |\n|---|---|\n| 1 | 2 |\n\nEnd.", False),
        # A definition at the end makes the words of the first paragraph a link.
        ("See [the log][log] first.\n\nThen the rest.\n\n[log]: https://example.com\n", False),
    ],
)
async def test_a_streamed_answer_ends_as_the_reply_shown_whole(reply: str, kept: bool) -> None:
    """When a reply ends, its answer is exactly the reply shown whole (as when
    the conversation is opened again), a code block at its end highlighted
    whole. Its blocks stay as they streamed (none built again) when they are
    what the whole text builds; a link reference definition changes words
    above it, and the blocks are built again."""
    from textual.app import App, ComposeResult

    from chat.conversations.conversation import Message

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessageView(Message("assistant", ""))

    async with Host().run_test(size=(100, 80)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        view.start_stream()
        for n, piece in enumerate(token_pieces(reply)):
            await view.append(piece)
            if n % 4 == 0:
                await pilot.pause()
        await pilot.pause()
        streamed = list(view.body.children)
        await view.finish(reply, None)
        whole = AssistantMessageView(Message("assistant", reply))
        await pilot.app.mount(whole)
        await pilot.pause()
        assert blocks(view) == blocks(whole)
        assert (list(view.body.children) == streamed) is kept
        assert [block.size for block in view.body.children] == [
            block.size for block in whole.body.children
        ]


async def test_a_streaming_paragraph_draws_its_new_rows_as_textual_draws_the_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each frame draws what Textual draws for the paragraph's whole text
    (every row, its styles, links and the place each cell marks for
    selecting), while only the rows the new words changed are drawn: the
    paragraph is wrapped from its last row (docs/performance.md)."""
    from textual.app import App, ComposeResult
    from textual.visual import Visual

    from chat.conversations.conversation import Message

    rows_drawn: list[int] = []
    to_strips = Visual.to_strips.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Visual], widget: Widget, *args: object, **kwargs: object) -> object:
        strips = to_strips(cls, widget, *args, **kwargs)
        if type(widget).__name__ == "Paragraph":
            rows_drawn[-1] += len(strips)
        return strips

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessageView(Message("assistant", ""))

    text = STYLED + "See https://example.com for the log. " + STYLED
    async with Host().run_test(size=(60, 80)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        view.start_stream()
        monkeypatch.setattr(Visual, "to_strips", classmethod(counting))
        for piece in (text[i : i + 7] for i in range(0, len(text), 7)):
            rows_drawn.append(0)
            await view.append(piece)
            await pilot.pause()
            (paragraph,) = view.body.children
            width, height = paragraph.size
            # What Textual draws for the whole text (not counted).
            whole = to_strips(
                Visual, paragraph, paragraph._render(), width, height, paragraph.visual_style
            )
            drawn = paragraph._render_cache.lines[: len(whole)]
            assert [list(strip) for strip in drawn] == [list(strip) for strip in whole]
        rows = len(whole)
    assert rows > 20
    # A row or two a frame (the last, and the next when a word moves down),
    # not all of them: fewer than 2 on average.
    assert sum(rows_drawn) < 2 * len(rows_drawn)


async def test_text_set_before_a_paragraphs_first_layout_asks_for_no_layout() -> None:
    """Under load a delivery can reach a paragraph mounted after the layout its
    mount asked for is due but before it ran: that layout lays the paragraph
    out with its text, so setting the text asks for no second one (this test
    counted one now and then under load). Laid out at no width, a paragraph is
    no lines tall whatever its text: no layout either."""
    from markdown_it.token import Token
    from textual.app import App
    from textual.content import Content
    from textual.widgets import Markdown

    from chat.ui.widgets import reply_markdown

    paragraph_class = reply_markdown.ReplyMarkdown.BLOCKS["paragraph_open"]
    app: App[None] = App()
    async with app.run_test(size=(60, 10)) as pilot:
        markdown = Markdown()
        await app.screen.mount(markdown)
        await pilot.pause()
        paragraph = paragraph_class(markdown, Token("paragraph_open", "p", 1))
        await markdown.mount(paragraph)
        assert paragraph.container_size == (0, 0)  # its first layout is to come
        paragraph.set_content(Content("the keeper logged the tide " * 4))
        assert not paragraph._layout_required
        await pilot.pause()
        assert paragraph.size.height == 2  # laid out with its text

        paragraph.styles.width = 0
        await pilot.pause()
        paragraph.set_content(Content("the keeper logged the tide " * 8))
        assert not paragraph._layout_required
        await pilot.pause()
        assert paragraph.size == (0, 0)


async def test_a_long_code_block_streams_without_a_parse_or_a_whole_highlight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A code block of 60 lines streamed three characters a delivery: its code
    grows without Markdown parsing the block again (chat.ui.widgets.fence_growth),
    and each highlight while it streams takes only the lines added since the
    last one and a few before them (chat.ui.widgets.code_lines), though here
    it is highlighted at every delivery. It ends highlighted whole, exactly."""
    from textual.app import App, ComposeResult
    from textual.widgets.markdown import MarkdownFence

    from chat.conversations.conversation import Message
    from chat.ui.widgets import reply_markdown

    monkeypatch.setattr(reply_markdown, "HIGHLIGHT_EVERY_S", 0.0)
    highlighted: list[int] = []  # the lines of each highlight
    highlight = MarkdownFence.highlight

    def counted(code: str, language: str, ansi: bool = False, dark: bool = False) -> object:
        highlighted.append(code.count("\n") + 1)
        return highlight(code, language, ansi=ansi, dark=dark)

    fence_class = reply_markdown.ReplyMarkdown.BLOCKS["fence"]
    monkeypatch.setattr(fence_class, "highlight", staticmethod(counted))
    parses = 0
    parser = reply_markdown.markdown_parser()

    class CountedParser:
        def parse(self, text: str, env: object = None) -> object:
            nonlocal parses
            parses += 1
            return parser.parse(text, env)  # type: ignore[arg-type]

    monkeypatch.setattr(reply_markdown, "markdown_parser", CountedParser)

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessageView(Message("assistant", ""))

    code = "\n".join(f"step_{n} = keeper.log('hour {n}', tide={n % 7})" for n in range(60))
    reply = f"```python\n{code}\n```\n"
    async with Host().run_test(size=(100, 30)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        view.start_stream()
        for piece in token_pieces(reply[: reply.index("\n```\n")]):
            await view.append(piece)
        await pilot.pause()
        (fence,) = view.body.query(fence_class)
        assert fence._content.plain == code
        assert parses <= 12, parses  # the fence's first lines; not one a delivery
        assert len(highlighted) > 100 and max(highlighted) <= 6
        await view.append(reply[reply.index("\n```\n") :])  # the fence closes
        await view.finish(reply, None)
        await pilot.pause()
        assert fence.is_attached  # the blocks streamed stay
        exact = highlight(code, "python", dark=True)
        assert (fence._content.plain, fence._content.spans) == (exact.plain, exact.spans)
