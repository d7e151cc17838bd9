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

Frames are paced by the tokens too: a piece waits for `TOKENS_PER_FRAME`
tokens (or `TOKEN_WAIT_S`) before it is drawn. Where a model decodes slower
(a deeper context, a larger model) a frame per token or two would draw the
same text in more frames, so the UI would cost more per token the longer a
conversation gets; this way it costs about the same per token where the
decode rate allows, and the screen still changes at least 11 times a second
(10 where the budget says so). A frame of text costs about the same whatever
it carries, so the fewer frames a token, the less the UI takes from llama.cpp
(docs/performance.md, "Eight tokens a frame").
"""

from __future__ import annotations

import time
from collections.abc import Callable

FASTEST_FRAME_S = 1 / 15
SLOWEST_FRAME_S = 1 / 10
UI_BUDGET = 0.06
"""The share of one core the UI thread may use while a reply streams."""
TOKENS_PER_FRAME = 8
"""The tokens a frame waits for, up to `TOKEN_WAIT_S`: 15 frames a second
from 120 tok/s up (a GPU's rates: more tokens a frame), 11-15 between 88 and
120, and 11 below (the demo model's 40th reply here, 55-65 tok/s, and its
first at 75-90). It was 5 with 12 frames a second at the least: a reply at
75-100 tok/s was drawn at 15 frames a second, 5-7 tokens a frame, and one at
60 at 12, so the UI cost up to half as much again per token as needed
(docs/performance.md, "Eight tokens a frame")."""
TOKEN_WAIT_S = 1 / 11
"""The longest a frame waits for its tokens: 11 frames a second, so that the
whole reply, the wait for its first token included, is drawn at more than
the 10 frames a second that read as live."""


def delivery_due(waited_s: float, tokens: int, frame_s: float, per_frame: int) -> bool:
    """Whether the reply's waiting piece (`tokens` sampled over `waited_s`
    since the last delivery) is drawn now: after at least `frame_s`, once
    `per_frame` tokens wait or `TOKEN_WAIT_S` has passed."""
    if waited_s < frame_s:
        return False
    return tokens >= per_frame or waited_s >= max(frame_s, TOKEN_WAIT_S)


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
