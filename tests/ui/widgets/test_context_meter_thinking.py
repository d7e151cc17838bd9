"""The context meter's thinking segment when a reply that thought is
continued: the plan carries the reply's thinking so far (ChatSession.plan;
tests/session/test_thinking_continue.py checks it against the prompt sent),
and the meter starts its thinking segment from it (`add_reply_tokens` adds
the new part's to it)."""

from __future__ import annotations

from chat.session.context_window import WindowPlan
from chat.ui.widgets.context_meter import MeterState


def test_a_continued_replys_thinking_is_counted_from_the_start() -> None:
    # The user's message (10) and the reply's opening (3) are new; the reply
    # so far (40) is the reply, its thinking (30) apart.
    plan = WindowPlan(2048, 0, 5, 10 + 3 + 40, 100, (0,), continued=40, thinking=30)
    state = MeterState.from_plan(plan)
    assert (state.new, state.thinking, state.reply) == (13, 30, 10)
    assert state.used == plan.used
    assert state.sizes()["thinking"] == 30
