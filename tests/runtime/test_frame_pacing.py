"""How often a streaming reply is drawn, from what drawing costs the UI thread."""

from __future__ import annotations

from chat.runtime.frame_pacing import (
    FASTEST_FRAME_S,
    SLOWEST_FRAME_S,
    TOKEN_WAIT_S,
    FramePacer,
    delivery_due,
)


class Clocks:
    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0

    def frame(self, cpu: float, wall: float) -> None:
        self.cpu += cpu
        self.wall += wall


def pacer(clocks: Clocks, budget: float = 0.06) -> FramePacer:
    return FramePacer(budget, lambda: clocks.cpu, lambda: clocks.wall)


def test_cheap_frames_stay_at_fifteen_a_second() -> None:
    clocks = Clocks()
    pacing = pacer(clocks)
    for _ in range(20):
        clocks.frame(cpu=0.001, wall=FASTEST_FRAME_S)
        assert pacing.frame_shown() == FASTEST_FRAME_S


def test_costly_frames_are_drawn_less_often_until_the_ui_fits_its_budget() -> None:
    clocks = Clocks()
    pacing = pacer(clocks)
    frame_cost = 0.005  # CPU seconds per frame: 7.5 % of a core at 15 frames a second
    for _ in range(30):
        clocks.frame(cpu=frame_cost, wall=pacing.frame_s)
        pacing.frame_shown()
    assert frame_cost / pacing.frame_s <= 0.06 * 1.05
    assert pacing.frame_s < SLOWEST_FRAME_S


def test_never_slower_than_ten_frames_a_second_and_recovers() -> None:
    clocks = Clocks()
    pacing = pacer(clocks)
    for _ in range(30):
        clocks.frame(cpu=0.1, wall=pacing.frame_s)
        pacing.frame_shown()
    assert pacing.frame_s == SLOWEST_FRAME_S
    for _ in range(30):
        clocks.frame(cpu=0.0005, wall=pacing.frame_s)
        pacing.frame_shown()
    assert pacing.frame_s == FASTEST_FRAME_S


def test_one_expensive_frame_moves_the_interval_only_part_way() -> None:
    clocks = Clocks()
    pacing = pacer(clocks)
    clocks.frame(cpu=0.01, wall=FASTEST_FRAME_S)  # a code block rendered at once
    assert pacing.frame_shown() < SLOWEST_FRAME_S


def test_a_frame_waits_for_its_tokens_up_to_the_slowest_frame() -> None:
    assert not delivery_due(FASTEST_FRAME_S / 2, 10, FASTEST_FRAME_S, 5)  # too soon
    assert delivery_due(FASTEST_FRAME_S, 5, FASTEST_FRAME_S, 5)
    assert not delivery_due(FASTEST_FRAME_S, 4, FASTEST_FRAME_S, 5)  # a token short
    assert not delivery_due(TOKEN_WAIT_S * 0.99, 4, FASTEST_FRAME_S, 5)
    assert delivery_due(TOKEN_WAIT_S, 1, FASTEST_FRAME_S, 5)  # waited long enough
    assert delivery_due(FASTEST_FRAME_S, 1, FASTEST_FRAME_S, 1)  # the first piece


def test_a_slower_pace_than_the_slowest_frame_is_kept() -> None:
    # Only the pacer's budget decides an interval past the token's wait.
    assert not delivery_due(SLOWEST_FRAME_S, 1, 0.2, 5)
    assert delivery_due(0.2, 1, 0.2, 5)
