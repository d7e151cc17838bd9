"""A screen draws as soon as something needs drawing, at most once an
interval (chat.ui.frame_timer). Long intervals here, so that the machine's
timing noise is small beside what is checked."""

from __future__ import annotations

import asyncio
import time

from textual.app import App
from textual.timer import Timer

from chat.ui.frame_timer import FrameTimer
from chat.ui.screens.help import HelpScreen
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready

INTERVAL_S = 0.2


async def frames_after_a_long_one(timer_class: type[Timer]) -> tuple[float, float, float]:
    """A first frame longer than the interval, then something to draw the
    moment it ends, then again at once after the second frame: how long the
    second and third frames waited after being asked for, and the time
    between the second and third frames' starts (the screen pauses its timer
    at each frame, as Textual's does, and resumes it when a widget needs
    drawing)."""
    app: App[None] = App()
    async with app.run_test():
        began: list[float] = []
        drawn = asyncio.Event()

        def frame() -> None:
            timer.pause()
            began.append(time.monotonic())
            if len(began) == 1:
                time.sleep(INTERVAL_S * 1.25)  # a long layout
            drawn.set()

        timer = timer_class(app, INTERVAL_S, callback=frame, pause=True)
        timer._start()
        waits = []
        for _ in range(3):
            drawn.clear()
            asked = time.monotonic()
            timer.resume()
            await drawn.wait()
            waits.append(began[-1] - asked)
        timer.stop()
        return waits[1], waits[2], began[2] - began[1]


async def test_a_frame_asked_for_after_a_long_one_is_drawn_at_once() -> None:
    after_long, after_short, between = await frames_after_a_long_one(FrameTimer)
    assert after_long < INTERVAL_S / 2
    # After a short frame it waits out the interval: no more frames a second.
    assert between >= INTERVAL_S * 0.95
    assert after_short < INTERVAL_S * 1.5


async def test_textuals_own_timer_waits_a_tick_more_after_a_long_frame() -> None:
    """What FrameTimer is for: Textual's timer skips a tick too many after a
    frame longer than its interval (if this fails, Textual has changed)."""
    after_long, _, _ = await frames_after_a_long_one(Timer)
    assert after_long > INTERVAL_S * 1.2


async def test_the_chat_screen_and_the_help_screen_draw_from_a_frame_timer() -> None:
    app = make_app(ScriptedEngine(replies=[]))
    async with app.run_test() as pilot:
        await ready(app, pilot)
        assert isinstance(app.screen._update_timer, FrameTimer)
        await app.push_screen(HelpScreen.of(app.screen))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert isinstance(app.screen._update_timer, FrameTimer)
