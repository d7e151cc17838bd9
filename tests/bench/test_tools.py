"""The tool rows of the benchmark (chat.bench.tools): what each figure is
measured against and when its target is met, from figures given here (the
measuring itself runs in `python -m chat.bench --quick`)."""

from __future__ import annotations

from chat.bench.tools import (
    QWEN25_TEMPLATE,
    SERVER_PROGRAM,
    StepFigures,
    evaluated_row,
    median_steps,
    overhead_row,
    startup_row,
    ttft_row,
)


def steps(*figures: tuple[float, int, int]) -> list[StepFigures]:
    return [StepFigures(*each) for each in figures]


def test_later_steps_no_slower_than_the_first_meet_the_first_token_target() -> None:
    row = ttft_row(steps((0.40, 211, 211), (0.10, 61, 61), (0.12, 61, 61), (0.20, 61, 61)))
    assert row.value == 0.5  # the worst later step, against step 1
    assert row.ok is True
    assert row.note == "ms per step: 400, 100, 120, 200"


def test_a_step_slower_than_the_first_misses_unless_it_evaluates_more() -> None:
    slower = steps((0.40, 211, 211), (0.10, 61, 61), (0.48, 61, 61))
    assert ttft_row(slower).ok is False
    # A step that evaluates twice step 1's tokens may take up to twice as long.
    more_tokens = steps((0.40, 100, 100), (0.70, 200, 200))
    assert ttft_row(more_tokens).ok is True
    assert ttft_row(steps((0.40, 100, 100), (0.90, 200, 200))).ok is False


def test_evaluated_tokens_are_measured_against_the_call_and_its_result() -> None:
    kept = evaluated_row(steps((1.0, 211, 211), (0.1, 61, 61), (0.1, 58, 61)))
    assert (kept.value, kept.ok) == (0, True)
    assert kept.note == "steps 2-3 evaluated/new: 61/61, 58/61; step 1 211"
    # A step that evaluated the earlier prompt again: the worst step's excess.
    lost = evaluated_row(steps((1.0, 211, 211), (0.1, 61, 61), (0.5, 272, 61)))
    assert (lost.value, lost.ok) == (211, False)


def test_the_overhead_is_kvchats_median_call_minus_the_bare_sdks() -> None:
    row = overhead_row([0.004, 0.005, 0.006], [0.002, 0.003, 0.009])
    assert row.value is not None and abs(row.value - 2.0) < 1e-9
    assert (row.unit, row.ok) == ("ms", True)
    assert "kvchat 5.00 ms, SDK 3.00 ms" in row.note
    assert overhead_row([0.010], [0.004]).ok is False  # 6 ms over


def test_startup_with_servers_is_measured_against_none() -> None:
    row = startup_row([0.31, 0.30, 0.33], [0.30, 0.29, 0.35])
    assert row.value is not None and abs(row.value - 0.01) < 1e-9
    assert row.ok is True
    assert startup_row([0.50, 0.52], [0.30, 0.31]).ok is False


def test_each_steps_first_token_time_is_its_median_over_rounds() -> None:
    rounds = [
        steps((0.3, 211, 211), (0.1, 61, 61)),
        steps((0.5, 211, 211), (0.3, 61, 61)),
        steps((0.4, 211, 211), (0.2, 62, 61)),
    ]
    assert median_steps(rounds) == steps((0.4, 211, 211), (0.2, 62, 61))


def test_the_bench_carries_its_own_server_and_template() -> None:
    # A benchmark cannot import tests/: what it runs lives in chat/bench.
    assert SERVER_PROGRAM.is_file() and "chat/bench" in SERVER_PROGRAM.as_posix()
    assert "<tool_call>" in QWEN25_TEMPLATE.read_text(encoding="utf-8")
