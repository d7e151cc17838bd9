"""When a screen draws its next frame.

Textual draws a screen from a timer that runs while something on it needs
drawing, at most MAX_FPS times a second (60), and pauses in between. Its
timer keeps to a grid of ticks from when it started, and after a frame that
took longer than a tick (a layout here takes 10-20 ms) it skips one tick too
many (Textual 8.2's `Timer._run`: `count = int((now - start) / interval + 1)`
before the next tick is counted from it). What is asked for next is drawn up
to two ticks later: a Page Up pressed just after such a frame waited 20-30 ms
with nothing to do before its frame (benchmark row "scroll to the top ...:
Page Up to its frame, longest"; docs/performance.md, "A frame as soon as it
is wanted").

`FrameTimer` draws as soon as something needs drawing, but never sooner
than one tick after the last frame began: the same 60 frames a second at
most, without the wait. Installed on kvchat's screens, its dialogs and its
help screen (`DrawsWhenAsked`) only on the Textual versions it was checked
against (`textual_known`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from textual import _time  # Textual's own clock and sleep, as its timer uses
from textual.screen import UPDATE_PERIOD, Screen
from textual.timer import EventTargetGone, Timer

from chat.ui.textual_fixes import textual_known

if TYPE_CHECKING:
    _ScreenMixin = Screen[Any]
else:
    _ScreenMixin = object


class FrameTimer(Timer):
    """A screen's update timer: calls back as soon as it is resumed, unless
    the last call began less than its interval ago (then when the interval
    is up). The screen pauses it at each frame and resumes it when something
    needs drawing."""

    async def _run(self) -> None:
        last_began = -math.inf
        while True:
            await self._active.wait()
            wait = last_began + self._interval - _time.get_time()
            if wait > 0:
                await _time.sleep(wait)
                await self._active.wait()
            last_began = _time.get_time()
            try:
                await self._tick(next_timer=last_began, count=0)
            except EventTargetGone:
                break


class DrawsWhenAsked(_ScreenMixin):
    """For a screen: its frames come from a `FrameTimer`."""

    _frame_timer: Timer | None = None

    @property
    def _update_timer(self) -> Timer:
        if not textual_known():
            return super()._update_timer
        if self._frame_timer is None:
            # As Textual's `Screen._update_timer` makes its own (`set_interval`).
            timer = FrameTimer(
                self,
                UPDATE_PERIOD,
                name="screen_update",
                callback=self._on_timer_update,
                pause=True,
            )
            timer._start()
            self._timers.add(timer)
            self._frame_timer = timer
        return self._frame_timer
