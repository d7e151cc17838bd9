"""How many threads decode the next token: every core's worth while that is
faster, a thread fewer while the machine is busy.

llama.cpp's CPU backend runs a token on a team of threads that meet at a
barrier after every operation (hundreds per token). With as many threads as
cores, a core taken by anything else stalls the whole team: on a 2-core
machine the demo model decodes 90 tok/s with both threads and 52 with one,
but with one other busy program 17 with both and still 52 with one
(docs/performance.md, "Decode threads"). The app's own UI is light (a few
per cent of a core while a reply streams) and costs the full team about a
tenth; another program's build or a second model is not light.

So the engine decodes with the `wide` count and measures each window of a
few tokens. When a window at `wide` is slower than the latest window at
`narrow` (or none has been measured), the next window tries `narrow`, and the
faster of the two goes on: `narrow`'s window against what `wide` gave over
its latest windows (`WIDE_WINDOWS_JUDGED`), not the one slow window that
called the try. The app's own drawing makes single windows of `wide` 20-30 %
slower now and then (a frame that lays the screen out stalls the team for a
few milliseconds); judged on that one window, `narrow` won one reply in three
in the pseudo-terminal and kept it for hundreds of tokens, at 70 tok/s where
`wide` gave 85-90 (docs/performance.md, "Decode threads"). A stalled team
is not noise: its one slow token outweighs the windows before it.

While at `narrow`, `wide` is tried again after a while, waiting twice as
long after each try it loses (the busy program may run for minutes), up to a
limit, and at the first window of a reply that starts well after the last
try. A reply's tokens are the same whichever
count decodes them: each thread computes whole rows of a matrix.

Timings find a busy machine only once its tokens stall, and a reply's prompt
is evaluated before any token: the reply that first met another program
evaluated its prompt with a stalled team (seconds, in the app), and each try
of `wide` while the program ran stalled a token. So the chooser also asks the
kernel what runs on the cores (`others`, chat.engine.machine_load): before
prompt batches are evaluated (`look`, `before_batches`: a reply's, a
prefill's), and before trying `wide` again, which waits while other programs
still run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_TOKENS = 8
"""Tokens timed together: a window holds a frame or two of the UI's drawing
at usual rates, so its rate is what the reply gets."""

FIRST_TRY_AFTER = 256
"""Tokens at `narrow` before `wide` is tried again, after a `wide` that won."""

LONGEST_TRY_AFTER = 2048
"""The most tokens at `narrow` between tries of `wide`."""

WIDE_WINDOWS_JUDGED = 4
"""`wide`'s latest windows, their tokens over their time, are what a window
of `narrow` on trial must beat (unless the window that called the try was a
stall)."""

STALL_TOKENS = 5
"""A window of `wide` that lost this many tokens' time against `narrow`'s
rate is a stalled team, not the app's drawing: `narrow` is judged against it
alone, and a stall costs one token (docs/performance.md: a token of a stalled
team took 231 ms where one thread took 19; a frame that lays the screen out
holds the team 10-30 ms)."""

TRY_AFTER_PAUSE_S = 30.0
"""A reply that starts this long after the last try of `wide` tries it after
its first window: the busy program may have ended while the user read."""


class DecodeThreads:
    """Chooses between `wide` and `narrow` decode threads as tokens come.
    `set_threads(n)` makes the next token decode with n threads. Called on
    the thread that decodes, between tokens."""

    def __init__(
        self,
        wide: int,
        narrow: int,
        set_threads: Callable[[int], None],
        clock: Callable[[], float] = time.perf_counter,
        others: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.wide = wide
        self.narrow = narrow
        self.current = wide
        self._set_threads = set_threads
        self._clock = clock
        self._others = others
        """Other programs' threads on the cores now (chat.engine.machine_load;
        None: not known)."""
        self._hinted = False
        """The window on trial began a thread fewer because other programs ran."""
        self._first_look: int | None = None
        """Other programs' threads on the cores as the coming work was asked for."""
        self._rates: dict[int, float] = {}
        """The latest window's rate at each count (tokens a second)."""
        self._wide_windows: deque[tuple[int, float]] = deque(maxlen=WIDE_WINDOWS_JUDGED)
        """`wide`'s latest windows since it last lost: (tokens, seconds)."""
        self._stalled = False
        """The window of `wide` that called the try of `narrow` lost
        `STALL_TOKENS` or more: `narrow` is judged against it alone."""
        self._on_trial = False
        """The current count decodes one window, then the faster of the two goes on."""
        self._try_after = FIRST_TRY_AFTER
        self._at_narrow = 0
        """Tokens decoded at `narrow` since it won."""
        self._window_began: float | None = None
        self._window_tokens = 0
        self._tried_at = clock()
        """When a window of `wide` last ended."""
        self.switches = 0

    @property
    def rates(self) -> dict[int, float]:
        """The latest window's rate at each count measured (tokens a second)."""
        return dict(self._rates)

    def look(self) -> None:
        """Work is coming (a reply asked for, a prefill while the user pauses):
        the first look at the cores, `before_batches` takes the second."""
        self._first_look = self._others()

    def before_batches(self) -> None:
        """Prompt batches are about to be evaluated, with the count that goes
        with the current one. Other programs running on the cores in both
        looks (`look`, now) and the full team in use: a thread fewer from
        here, on trial, instead of a stalled team finding out; it stays if
        they still run when the next reply's first window ends. None running
        and a thread fewer in use: the full team, on trial. Two looks, since
        one is an instant: a terminal drawing the message just sent, say,
        runs for a moment."""
        first, self._first_look = self._first_look, None
        now = self._others()
        others = None if first is None or now is None else min(first, now)
        if others and self.current == self.wide:
            self._try(self.narrow, hinted=True)
        elif others == 0 and self.current == self.narrow:
            self._try(self.wide)

    def reply_started(self) -> None:
        """Time between replies is not decoding: the window starts again."""
        self._window_began = None
        if self.current == self.narrow and self._clock() - self._tried_at > TRY_AFTER_PAUSE_S:
            self._at_narrow = self._try_after

    def token_decoded(self) -> None:
        """A token was decoded (and sampled); the next is about to be."""
        now = self._clock()
        if self._window_began is None:  # the reply's first token came after its prompt
            self._window_began, self._window_tokens = now, 0
            return
        self._window_tokens += 1
        elapsed = now - self._window_began
        if self._window_tokens < WINDOW_TOKENS and not self._behind_narrow(elapsed):
            return
        self._window_began, self._window_tokens, tokens = now, 0, self._window_tokens
        if elapsed > 0:
            if self.current == self.wide:
                self._wide_windows.append((tokens, elapsed))
            self._judge(tokens, elapsed)

    def _behind_narrow(self, elapsed: float) -> bool:
        """At `wide`, whether this window is already a token's time behind
        `narrow`'s rate: judged at once, since a stalled team takes ten times
        a token's time or more (a whole window of it would cost seconds)."""
        narrow_rate = self._rates.get(self.narrow)
        return (
            self.current == self.wide
            and narrow_rate is not None
            and elapsed * narrow_rate > self._window_tokens + 1
        )

    def _judge(self, tokens: int, elapsed: float) -> None:
        rate = tokens / elapsed
        count = self.current
        other = self.narrow if count == self.wide else self.wide
        self._rates[count] = rate
        if count == self.wide:
            self._tried_at = self._clock()
        if self._on_trial:
            self._on_trial = False
            judged_on_windows = other == self.wide and not self._stalled
            other_rate = self._wide_rate() if judged_on_windows else self._rates.get(other)
            # Started a thread fewer because other programs ran: one look is
            # an instant, so a second says whether they go on (the full
            # team's rate, from before they started, says nothing of now).
            still_busy = self._hinted and bool(self._others())
            self._hinted = False
            winner = count if still_busy or other_rate is None or rate >= other_rate else other
            if winner == self.wide:
                self._try_after = FIRST_TRY_AFTER
            else:  # the next try of `wide` is judged on its own windows
                self._wide_windows.clear()
                if count == self.wide:  # a try of `wide` lost: wait longer next time
                    self._try_after = min(2 * self._try_after, LONGEST_TRY_AFTER)
            self._at_narrow = 0
            self._use(winner)
        elif count == self.wide:
            narrow_rate = self._rates.get(self.narrow)
            # Tokens' time lost against `narrow`: a stalled team loses ten
            # and more in its first token, a frame drawn two or three.
            lost = 0.0 if narrow_rate is None else elapsed * narrow_rate - tokens
            stalled = lost >= STALL_TOKENS
            wide_rate = self._wide_rate()
            if narrow_rate is None or stalled or (wide_rate or rate) < narrow_rate:
                self._try(self.narrow, stalled=stalled)
        else:
            self._at_narrow += WINDOW_TOKENS
            if self._at_narrow >= self._try_after:
                if self._others():
                    # The kernel says other programs still run: trying the
                    # full team would only stall a token to find that out.
                    self._at_narrow = 0
                else:
                    self._try(self.wide)

    def _wide_rate(self) -> float | None:
        """What `wide` gave over its latest windows (None: none measured)."""
        tokens = sum(count for count, _ in self._wide_windows)
        seconds = sum(elapsed for _, elapsed in self._wide_windows)
        return tokens / seconds if seconds > 0 else self._rates.get(self.wide)

    def _try(self, count: int, hinted: bool = False, stalled: bool = False) -> None:
        self._on_trial = True
        self._hinted = hinted
        self._stalled = stalled
        self._use(count)

    def _use(self, count: int) -> None:
        if count != self.current:
            # A change costs well under a millisecond: the window starts now.
            self.current = count
            self.switches += 1
            self._set_threads(count)
