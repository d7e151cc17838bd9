"""While a reply streams the meter is drawn with a delivery of text (in the
frame that draws the text), at most every STREAM_REDRAW_S; a timer draws
only a change that no delivery follows."""

from __future__ import annotations

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

from chat.ui.widgets.context_meter import ContextMeter, MeterState
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready

REDRAW_S = 0.3


async def test_the_meter_is_drawn_with_deliveries_and_by_a_timer_only_after_a_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ContextMeter, "STREAM_REDRAW_S", REDRAW_S)
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await ready(app, pilot)
        await pilot.pause(0.3)  # the meter's first plan drawn
        meter = screen.query_one(ContextMeter)
        meter.show(MeterState(n_ctx=8192, system=20, reserved=512))
        delivering = False
        drawn: list[tuple[bool, int]] = []
        """Each drawing: whether a delivery drew it, and the reply's tokens shown."""
        redraw = meter._redraw

        def counted() -> None:
            redraw()
            assert meter.state is not None
            drawn.append((delivering, meter.state.reply))

        def deliver(tokens: int) -> None:
            nonlocal delivering
            delivering = True
            meter.add_reply_tokens(tokens)
            delivering = False

        monkeypatch.setattr(meter, "_redraw", counted)
        deliver(3)  # drawn: nothing was drawn for STREAM_REDRAW_S
        deliver(3)  # too soon: waits
        # A pause longer than STREAM_REDRAW_S: the next delivery draws both
        # (a timer at STREAM_REDRAW_S drew the change in a frame of its own).
        await pilot.pause(1.2 * REDRAW_S)
        assert drawn == [(True, 3)]
        deliver(3)
        assert drawn == [(True, 3), (True, 9)]
        deliver(3)  # too soon, and no delivery follows: the timer draws it
        await pilot.pause(2 * REDRAW_S + 0.2)
        assert drawn == [(True, 3), (True, 9), (False, 12)]


def cells(strip: Strip) -> list[tuple[str, Style | None, object]]:
    """Each cell as drawn: its character, its style (without the marks for
    selecting) and its place as marked for selecting."""
    return [
        (character, segment.style and segment.style.clear_meta_and_links(), offset(segment, at))
        for segment in strip
        for at, character in enumerate(segment.text)
    ]


def offset(segment: Segment, at: int) -> object:
    mark = segment.style.meta.get("offset") if segment.style else None
    return None if mark is None else (mark[0] + at, mark[1])


def drawn_by_textual(meter: ContextMeter) -> list[Strip]:
    """The meter's line as Textual draws a Static's text."""
    meter._render_content()
    return meter._render_cache.lines


STATES = [
    MeterState(n_ctx=8192, system=20, history=300, new=15, reply=0, reserved=1024),
    MeterState(n_ctx=8192, system=20, history=3000, new=15, reply=412, reserved=612, left_out=3),
    MeterState(n_ctx=4096, system=11, history=120, tools=230, new=9, reply=40, thinking=88),
    MeterState(n_ctx=8192),
]


@pytest.mark.parametrize("width", [130, 100, 80, 60, 30])
async def test_the_meters_line_is_what_textual_draws(width: int) -> None:
    """The meter draws its line itself (cheaper than Textual's text pipeline,
    at each redraw while a reply streams): each cell is what Textual draws
    for the same text, in every form the width picks, every segment, the
    estimate's mark, the bold of messages left out, the counting notice."""
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(width, 30)) as pilot:
        screen = await ready(app, pilot)
        meter = screen.query_one(ContextMeter)
        for estimated in (False, True):
            meter.estimated = estimated
            for state in STATES:
                meter.show(state)
                await pilot.pause()
                (line,) = meter.render_lines(Region(0, 0, meter.size.width, 1))
                assert meter._text.cell_len <= meter.content_size.width  # nothing cut
                assert meter._line is not None  # drawn by the meter, not by Textual
                (textual_line,) = drawn_by_textual(meter)
                assert cells(meter.render_line(0)) == cells(textual_line)
                assert line.text.startswith(" ") and meter.render_line(0).text.strip()
        meter.show_counting()
        await pilot.pause()
        counting = cells(meter.render_line(0))
        assert counting == cells(drawn_by_textual(meter)[0])
        app.theme = "kvchat-light"  # drawn again in the new theme's colours
        await pilot.pause()
        assert cells(meter.render_line(0)) == cells(drawn_by_textual(meter)[0]) != counting


@pytest.mark.parametrize("width", [120, 130, 160])
async def test_the_meter_keeps_every_count_where_the_long_form_is_too_wide(width: int) -> None:
    """From 120 columns the meter draws its long form where it fits, a tighter
    one next, else a compact form: a form too wide was wrapped at a word,
    and the free count (and messages left out) went missing at 120 columns."""
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(width, 30)) as pilot:
        screen = await ready(app, pilot)
        meter = screen.query_one(ContextMeter)
        for state in STATES[:3]:
            meter.show(state)
            await pilot.pause()
            shown = meter._text.plain
            assert len(shown) <= meter.content_size.width
            assert f"free {state.free:,}" in shown
            if state.left_out:
                left_out = state.left_out
                assert f"{left_out} messages outside" in shown or f"{left_out} left out" in shown
        meter.show(STATES[0])
        await pilot.pause()
        if width >= 130:  # the long form, with the window's share, where it fits
            assert "tokens · 4%" in meter._text.plain


@pytest.mark.parametrize("width", [60, 80, 110, 160])
async def test_a_message_too_long_to_send_is_said_before_enter(width: int) -> None:
    """A 500 kB attachment: the meter read 122,765/8,192 with nothing else to
    say that Enter would refuse it. It says how many tokens are too many, near
    its start, where a narrow terminal still shows it."""
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(width, 30)) as pilot:
        screen = await ready(app, pilot)
        meter = screen.query_one(ContextMeter)
        too_long = MeterState(n_ctx=8192, system=11, new=122_754, reserved=1024)
        assert too_long.too_many == 115_597
        meter.show(too_long)
        await pilot.pause()
        assert "⚠ 115,597 too many" in meter._text.plain
        assert any("115,597 tokens too many" in line for line in meter.legend_lines())
        meter.show(MeterState(n_ctx=8192, system=11, new=7_000, reserved=1024))
        await pilot.pause()
        assert "too many" not in meter._text.plain
