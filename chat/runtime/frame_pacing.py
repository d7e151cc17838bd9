"""How often a streaming reply is drawn.

Every delivery of new text costs the UI thread a Markdown update and a frame
of the screen, whatever the number of tokens in it (docs/performance.md has
the figures): what the UI costs per token falls with the frames drawn per
second, not with the tokens. That CPU is taken from llama.cpp on a small
machine (and from the battery on a laptop), and a costly frame (a code block,
a key typed) may come at any time. So a reply is drawn 15 times a second
while drawing is cheap, and less often (never under 10, which still reads as
live) when the UI thread would otherwise use more than `budget` of a core:
the text then arrives in slightly larger pieces, and decoding keeps its core.
"""

from __future__ import annotations

import time
from collections.abc import Callable

FASTEST_FRAME_S = 1 / 15
SLOWEST_FRAME_S = 1 / 10
UI_BUDGET = 0.06
"""The share of one core the UI thread may use while a reply streams."""


class FramePacer:
    """Call `frame_shown` on the UI thread each time a piece of the reply has
    been handed to the screen; it returns the interval to deliver the next
    piece after, from the UI thread's CPU use since the last call."""

    def __init__(
        self,
        budget: float = UI_BUDGET,
        cpu_clock: Callable[[], float] = time.thread_time,
        wall_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.frame_s = FASTEST_FRAME_S
        self._cpu_clock, self._wall_clock = cpu_clock, wall_clock
        self._cpu = cpu_clock()
        self._wall = wall_clock()

    def frame_shown(self) -> float:
        cpu, wall = self._cpu_clock(), self._wall_clock()
        used, spent = cpu - self._cpu, wall - self._wall
        self._cpu, self._wall = cpu, wall
        if spent <= 0:
            return self.frame_s
        share = used / spent
        # A quarter of the way from the interval now to the one that would meet
        # the budget: one expensive frame (a code block rendered, a key typed)
        # moves it a little, a steady cost all the way within a few frames.
        wanted = self.frame_s * share / self.budget
        moved = self.frame_s + (wanted - self.frame_s) / 4
        self.frame_s = min(SLOWEST_FRAME_S, max(FASTEST_FRAME_S, moved))
        return self.frame_s
