"""The context meter's thinking segment when a reply that thought is
continued: the plan carries the reply's thinking so far (ChatSession.plan;
tests/session/test_thinking_continue.py checks it against the prompt sent),
and the meter starts its thinking segment from it (`add_reply_tokens` adds
the new part's to it)."""

from __future__ import annotations

from chat.session.context_window import WindowPlan
from chat.ui.widgets.context_meter import MeterState


def test_a_continued_replys_thinking_is_counted_from_the_start() -> None:
    plan = WindowPlan(2048, 0, 15, 3 + 40, 100, (0,), thinking=30)
    state = MeterState.from_plan(plan)
    assert state.thinking == 30 and state.new == 13
    assert state.used == plan.used
    assert state.sizes()["thinking"] == 30
