"""The chat screen's compositor draws a partial update exactly as Textual's
own does, asking each widget only for the update's rows, and not at all a
widget that lies under another in all of the update."""

from __future__ import annotations

import random

import pytest
from textual._compositor import Compositor
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets._markdown import MarkdownParagraph  # not re-exported by textual 8

from chat.ui.row_compositor import RowCroppedCompositor
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.message_view import AssistantMessageView
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, replied

REPLY = (
    "The keeper **lit the lamp** at dusk.\n\n"
    "- the tide\n- the wind\n- a *ship* far out\n\n"
    "```python\nlog = ['tide', 'wind']\nprint(log)\n```\n\n"
    + "He wrote it all down, line after line, until the morning came. "
    * 6
)


def drawn(compositor: Compositor, crop: Region, rows: set[int]) -> list[tuple[int, int, object]]:
    """The cells an update of `crop` on `rows` draws (Textual's ChopsUpdate
    writes only those), as (x, y, segments) per piece of a line."""
    chops = compositor._render_chops(crop, rows.__contains__)
    cells = []
    for y in sorted(rows):
        for (cut, strip), end in zip(chops[y].items(), compositor.cuts[y][1:], strict=True):
            if end <= crop.x or cut >= crop.right:
                continue
            assert strip is not None, f"nothing drawn at ({cut}, {y})"
            left, right = max(cut, crop.x), min(end, crop.right)
            cells.append((left, y, list(strip.crop(left - cut, right - cut))))
    return cells


async def test_a_partial_update_is_drawn_as_textuals_compositor_draws_it() -> None:
    engine = ScriptedEngine(replies=[[REPLY[i : i + 7] for i in range(0, len(REPLY), 7)]])
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await replied(app, pilot, "the log, please")
        assert isinstance(screen, ChatScreen)
        assert app.query(AssistantMessageView)
        compositor = screen._compositor
        assert isinstance(compositor, RowCroppedCompositor)
        textuals = Compositor()
        textuals.__dict__.update(compositor.__dict__)  # the same layout, Textual's drawing
        width, height = compositor.size
        shuffled = random.Random(7)
        for _ in range(60):
            top = shuffled.randrange(height)
            rows = shuffled.randint(1, height - top)
            left = shuffled.randrange(width)
            crop = Region(left, top, shuffled.randint(1, width - left), rows)
            lines = {y for y in range(top, top + rows) if shuffled.random() < 0.7} or {top}
            assert drawn(compositor, crop, lines) == drawn(textuals, crop, lines)


async def test_an_update_inside_a_paragraph_draws_only_the_paragraph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A streaming paragraph's frame: the screen, the conversation and the
    reply's containers lie under the paragraph there and are not drawn."""
    engine = ScriptedEngine(replies=[[REPLY]])
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await replied(app, pilot, "the log, please")
        compositor = screen._compositor
        paragraph = screen.query(MarkdownParagraph).last()
        region = paragraph.region
        assert region.height > 1
        asked: list[Widget] = []
        render_lines = Widget.render_lines

        def spy(widget: Widget, crop: Region) -> object:
            asked.append(widget)
            return render_lines(widget, crop)

        crop = Region(region.x, region.bottom - 2, region.width, 2)
        rows = set(range(crop.y, crop.bottom))
        textuals = Compositor()
        textuals.__dict__.update(compositor.__dict__)
        expected = drawn(textuals, crop, rows)
        monkeypatch.setattr(Widget, "render_lines", spy)
        assert drawn(compositor, crop, rows) == expected
        assert asked == [paragraph]
