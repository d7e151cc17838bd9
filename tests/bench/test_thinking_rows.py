"""The reasoning rows of the benchmark (chat.bench.thinking): how each reads
its figures into a verdict."""

from __future__ import annotations

from chat.bench.thinking import UI_COST_TARGET, prefill_row, reuse_row, ui_cost_row


def test_a_turn_that_evaluates_no_more_than_the_least_possible_meets_it() -> None:
    row = reuse_row("turn 2", 33, 33, 48, "answer again")
    assert row.ok is True and row.value == 33
    assert row.target == "<= 33 (least possible)"
    assert row.note == "of 48 sent; answer again"
    assert reuse_row("turn 2", 34, 33, 48).ok is False
    missing = reuse_row("turn 2", None, 33, 48)
    assert missing.value is None and missing.ok is None


def test_a_prefilled_draft_answers_sooner_than_one_sent_at_once() -> None:
    row = prefill_row(0.30, 0.45, 0.01)
    assert row.ok is True and round(row.value or 0) == 300 and row.unit == "ms"
    assert "without prefill 450 ms" in row.note
    assert prefill_row(0.5, 0.45, 0.01).ok is False
    assert "medians" not in row.note
    assert prefill_row(0.30, 0.45, 0.01, rounds=5).note.endswith("medians of 5, taking turns")


def test_the_ui_cost_of_thinking_is_a_ratio_to_a_plain_reply() -> None:
    row = ui_cost_row(120e-6, 100e-6)
    assert row.value is not None and abs(row.value - 1.2) < 1e-9
    assert row.ok is True and "120 µs per thinking token" in row.note
    assert ui_cost_row(UI_COST_TARGET * 2e-4, 1e-4).ok is False
    assert ui_cost_row(1e-4, 0.0).value is None
