"""Python's full garbage collections wait for a quiet moment (chat.ui.tuning):
not while a reply is drawn, not right after a key; an overdue one runs anyway;
the thresholds are Python's again once the app has ended."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from chat.ui.tuning import QuietCollections
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


UNFREEZE = gc.unfreeze
"""Python's own, for the cleanup: a test may count the calls in its place."""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    clock = Clock()
    monkeypatch.setattr("chat.ui.tuning.time.monotonic", clock)
    thresholds = gc.get_threshold()
    yield clock
    gc.set_threshold(*thresholds)
    UNFREEZE()  # what a collection froze: the other tests' objects are not the app's


def full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def with_waiting(monkeypatch: pytest.MonkeyPatch, young_collections: int) -> None:
    """gc.get_count() as if `young_collections` of the middle generation ran
    since the last full collection."""
    monkeypatch.setattr("chat.ui.tuning.gc.get_count", lambda: (0, 0, young_collections))


def test_python_never_starts_a_full_collection_itself(clock: Clock) -> None:
    before = gc.get_threshold()
    collections = QuietCollections()
    collections.take_over()
    assert gc.get_threshold()[:2] == before[:2]
    assert gc.get_threshold()[2] >= QuietCollections.NEVER
    collections.give_back()
    assert gc.get_threshold() == before


def unfreezes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the full collections: only those unfreeze what was frozen first."""
    calls: list[int] = []
    monkeypatch.setattr("chat.ui.tuning.gc.unfreeze", lambda: calls.append(1))
    return calls


def test_a_full_collection_waits_for_quiet(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Enough waiting for a full collection, it waits for a quiet moment; busy
    meanwhile, only the overdue one runs, which unfreezes nothing."""
    collections = QuietCollections()
    collections.take_over()
    full = unfreezes(monkeypatch)
    with_waiting(monkeypatch, QuietCollections.DUE_YOUNG_COLLECTIONS)
    clock.now += QuietCollections.EVERY_S
    collections.tick(busy=True)  # a reply is drawn
    collections.input_seen()
    clock.now += QuietCollections.IDLE_S / 2
    collections.tick(busy=False)  # a key just now
    assert not full
    clock.now += QuietCollections.IDLE_S
    done = full_collections()
    assert collections.tick(busy=False)
    assert full_collections() == done + 1 and len(full) == 1
    clock.now += 1
    collections.tick(busy=False)  # not again so soon
    with_waiting(monkeypatch, QuietCollections.DUE_YOUNG_COLLECTIONS - 1)
    clock.now += QuietCollections.EVERY_S
    assert not collections.tick(busy=False)  # nothing much to collect
    assert len(full) == 1


def test_an_overdue_collection_runs_even_when_busy(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It skips what survived the last collection (frozen) and is not a full
    one: nothing is unfrozen, and what survives it is frozen in turn."""
    collections = QuietCollections()
    collections.take_over()
    full = unfreezes(monkeypatch)
    with_waiting(monkeypatch, QuietCollections.OVERDUE_YOUNG_COLLECTIONS)
    collections.input_seen()
    assert collections.tick(busy=False)  # keys come: not quiet
    assert not full
    assert gc.get_freeze_count() > 0


def test_an_overdue_collection_waits_for_the_reply_to_end_unless_long(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a reply is drawn the overdue collection waits for more young
    collections; after the reply it runs at the next tick."""
    collections = QuietCollections()
    collections.take_over()
    with_waiting(monkeypatch, QuietCollections.OVERDUE_YOUNG_COLLECTIONS)
    collections.input_seen()
    assert not collections.tick(busy=True)  # a reply is drawn
    assert collections.tick(busy=False)  # it ended
    with_waiting(monkeypatch, QuietCollections.OVERDUE_WHILE_STREAMING)
    assert collections.tick(busy=True)  # a long reply: not later than this


async def test_the_app_holds_full_collections_while_it_runs() -> None:
    """In the real app: Python's trigger is off while it runs, a reply is
    drawn without a full collection, and the trigger is back after."""
    before = gc.get_threshold()
    engine = ScriptedEngine(replies=["A short reply, in a few words."], delay=0.01)
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        assert gc.get_threshold()[2] >= QuietCollections.NEVER
        await send(pilot, "hello")
        await turn_done(screen, pilot, 2)
        # Quiet now: once due, the app's timer collects.
        collections = app.quiet_collections
        collections.EVERY_S = 0.0
        collections.DUE_YOUNG_COLLECTIONS = 0
        done = full_collections()
        await wait_for(lambda: full_collections() > done, pilot, timeout=15)
    assert gc.get_threshold() == before
