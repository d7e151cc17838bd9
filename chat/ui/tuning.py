"""Process-wide tuning for a UI that shares two cores with llama.cpp."""

from __future__ import annotations

import gc
import sys
import time

# How long a thread may keep the GIL while another waits for it (Python's
# default: 5 ms). The reply thread spends most of each token in llama.cpp,
# without the GIL, and needs it back briefly between tokens; with the default
# it waits up to 5 ms whenever the UI is drawing (chat.bench, "decode: full
# app", compares the app with a bare llama-cpp-python loop).
GIL_SWITCH_INTERVAL_S = 0.0001


def share_the_gil_quickly() -> None:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def settle_startup_garbage() -> None:
    """After the first frame: the `chat` command turned the cyclic collector off
    for startup (see chat.cli.main). What startup built lives as long as the
    app: frozen, later collections skip it (until a full one at a quiet
    moment, `QuietCollections`). Then collect again."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


class QuietCollections:
    """Python's full collection walks every object the app holds: about 40 ms
    with a new conversation, 130-280 ms with a long one open (measured while
    scrolling up a 2,000-message conversation, where it was the longest
    step's largest part). Left to Python it comes in the middle of whatever
    allocates: a frame of a streamed reply, a page mounted while the user
    scrolls. Here the young collections stay Python's (cheap: they walk only
    new objects), and the full one waits for a quiet moment: no reply drawn
    and no key or mouse for IDLE_S.

    Busy for long (a user paging up through thousands of messages, each page
    of views mounted and set aside again), garbage still builds up in the
    oldest generation: a collection of the middle generation runs anyway
    once OVERDUE_YOUNG_COLLECTIONS of them have waited, without the objects
    that survived the last collection, which are frozen after every one
    (`gc.freeze`: they stay where they are, and collections skip them), so it
    walks only what the app made since: tens of milliseconds, where a full
    one after a minute of paging walked 800,000 objects for 1.9 s. What was
    frozen and has died since is collected at the next quiet moment, which
    unfreezes everything first."""

    TICK_S = 0.25
    """How often the app calls `tick`: often enough that an overdue collection
    finds about OVERDUE_YOUNG_COLLECTIONS waiting, not several times that."""
    IDLE_S = 1.0
    EVERY_S = 30.0
    """At most one full collection this often while idle: an idle app still
    allocates a little (a blinking cursor), and a full collection costs."""
    DUE_YOUNG_COLLECTIONS = 10
    """Python's own trigger: ten collections of the middle generation."""
    OVERDUE_YOUNG_COLLECTIONS = 10
    """Python's own trigger for a full collection too; about a page of
    messages mounted while scrolling up (the benchmark's row "scroll to the
    top"), tens of milliseconds to collect without the frozen objects."""
    OVERDUE_WHILE_STREAMING = 40
    """The same while a reply is drawn: a streaming reply of the demo model
    makes about ten in 300 tokens, and the collection (15-18 ms of the UI
    thread, measured at the 40th reply of a conversation) came in the middle
    of nearly every reply, a frame late and a core taken from llama.cpp. Now
    it waits for the reply's end, unless the reply is long (about 1,200
    tokens): the garbage of a reply is collected at the tick after it."""
    NEVER = 1_000_000_000

    def __init__(self) -> None:
        self._last_input = self._last_full = time.monotonic()
        self._thresholds: tuple[int, int, int] | None = None

    def take_over(self) -> None:
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            young, middle, _ = self._thresholds
            gc.set_threshold(young, middle, self.NEVER)

    def give_back(self) -> None:
        """Python triggers full collections again (the app has ended)."""
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def input_seen(self) -> None:
        self._last_input = time.monotonic()

    def tick(self, busy: bool) -> bool:
        """Called every TICK_S, `busy` while a reply is drawn; True when it collected."""
        if self._thresholds is None:
            return False
        waited = gc.get_count()[2]
        now = time.monotonic()
        quiet = not busy and now - self._last_input >= self.IDLE_S
        rested = now - self._last_full >= self.EVERY_S
        if quiet and rested and waited >= self.DUE_YOUNG_COLLECTIONS:
            gc.unfreeze()  # everything, what startup built included
            gc.collect()
            self._last_full = time.monotonic()
        elif waited >= (self.OVERDUE_WHILE_STREAMING if busy else self.OVERDUE_YOUNG_COLLECTIONS):
            gc.collect()  # what is not frozen: made since the last collection
        else:
            return False
        gc.freeze()
        return True
