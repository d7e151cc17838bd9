"""While a reply streams the meter is drawn with a delivery of text (in the
frame that draws the text), at most every STREAM_REDRAW_S; a timer draws
only a change that no delivery follows."""

from __future__ import annotations

import pytest

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
