"""How a span of the KV cache is cut into prompt batches (chat.engine.batches)."""

from __future__ import annotations

import itertools

from chat.engine.batches import TIMED_FIRST, chunks, timed_chunks


class Clock:
    """A clock that moves only as the batches are "evaluated"."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def evaluate(spans, clock: Clock, seconds_per_token: float) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    done = []
    for first, last in spans:
        clock.now += (last - first) * seconds_per_token
        done.append((first, last))
    return done


def test_timed_batches_take_about_the_time_asked_for() -> None:
    clock = Clock()
    # A slow machine: 50 tokens a second, batches of about 0.1 s wanted.
    spans = evaluate(timed_chunks(100, 200, 0.1, 64, clock), clock, 0.02)
    sizes = [last - first for first, last in spans]
    assert sizes[0] == TIMED_FIRST
    assert set(sizes[1:-2]) == {5}  # (the last two: 4 and 2, never 5 and 1)
    assert spans[0][0] == 100 and spans[-1][1] == 200
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_a_fast_machine_gets_the_largest_batches() -> None:
    clock = Clock()
    spans = evaluate(timed_chunks(0, 300, 0.1, 64, clock), clock, 0.0001)
    assert [last - first for first, last in spans] == [4, 64, 64, 64, 64, 40]


def test_no_timed_batch_is_of_one_token() -> None:
    for length in range(1, 80):
        for rate in (0.001, 0.02, 0.5):
            clock = Clock()
            spans = evaluate(timed_chunks(0, length, 0.1, 64, clock), clock, rate)
            sizes = [last - first for first, last in spans]
            assert sum(sizes) == length
            assert length == 1 or min(sizes) >= 2, (length, rate, sizes)


def test_timed_batches_never_pass_the_largest() -> None:
    clock = Clock()
    spans = evaluate(timed_chunks(0, 50, 0.1, 8, clock), clock, 0.0)  # a clock that never moves
    assert max(last - first for first, last in spans) <= 8


def test_fixed_batches_leave_two_tokens_for_the_last() -> None:
    assert list(chunks(0, 9, 4)) == [(0, 4), (4, 7), (7, 9)]
