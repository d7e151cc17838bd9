"""The chat screen's compositor draws a partial update exactly as Textual's
own does, asking each widget only for the update's rows."""

from __future__ import annotations

import random

from textual._compositor import Compositor
from textual.geometry import Region

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


def drawn(compositor: Compositor, crop: Region, rows: set[int]) -> list[dict[int, list[object]]]:
    chops = compositor._render_chops(crop, rows.__contains__)
    return [
        {cut: None if strip is None else list(strip) for cut, strip in line.items()}
        for y, line in enumerate(chops)
        if y in rows
    ]


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
