"""The context meter's tools segment (issue 30, point 6): earlier turns'
tool steps (each intermediate reply, its calls and their results) counted
apart from the rest of the earlier conversation, shown only when there are
any; the segments still add up to what is sent. With the real model behind a
tool-calling template: tests/session/test_tool_history.py."""

from __future__ import annotations

from typing import Any

from chat.conversations.conversation import Conversation, Message
from chat.session.context_window import ContextBudget, WindowPlan, prompt_messages
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from tests.session.test_tool_history import kept_reply, scripted_outcome


def tokens_per_message(messages: Any, opening: bool = False, **_: Any) -> list[int]:
    """A tokenizer that gives each message 10 tokens (and the opening 3)."""
    return [0] * (10 * len(messages) + (3 if opening else 0))


def test_earlier_tool_steps_are_their_own_segment_and_the_total_is_what_is_sent() -> None:
    conv = Conversation(
        messages=[Message("user", "Echo hi"), kept_reply(scripted_outcome()), Message("user", "Ok")]
    )
    budget = ContextBudget(tokens_per_message, 4096)
    plan = budget.plan("", conv.messages, "Thanks.", 100, "stop")
    # The tool turn is sent as the call's reply, two results and the answer:
    # its steps are three of those four messages.
    assert plan.tool_steps == 30
    sent = prompt_messages(conv, plan, Message("user", "Thanks."))
    state = MeterState.from_plan(plan)
    assert state.tools == 30 and state.history == plan.history - 30
    assert state.used == plan.used == len(tokens_per_message(sent, True))
    assert list(state.sizes())[:4] == ["system", "history", "tools", "new"]


def test_a_turn_stopped_after_its_calls_is_all_tools() -> None:
    conv = Conversation(
        messages=[Message("user", "Echo hi"), kept_reply(scripted_outcome(answered=False))]
    )
    plan = ContextBudget(tokens_per_message, 4096).plan("", conv.messages, "Go on.", 100, "stop")
    assert plan.tool_steps == 30 == plan.history - 10


def test_a_left_out_tool_turn_is_not_counted() -> None:
    conv = Conversation(
        messages=[Message("user", "Echo hi"), kept_reply(scripted_outcome()), Message("user", "Ok")]
    )
    plan = ContextBudget(tokens_per_message, 90).plan("", conv.messages, "x", 40, "drop-oldest")
    assert 1 not in plan.included and plan.tool_steps == 0


def test_without_tool_steps_the_meter_has_no_tools_segment() -> None:
    state = MeterState.from_plan(WindowPlan(2048, 10, 20, 5, 100, (0,)))
    assert state.tools == 0 and "tools" not in state.sizes()
    meter = ContextMeter()
    meter.state = state
    assert not any(line.startswith("tools") for line in meter.legend_lines())


def test_the_legend_names_the_tools_segment() -> None:
    state = MeterState.from_plan(WindowPlan(2048, 10, 50, 5, 100, (0, 1), tool_steps=30))
    meter = ContextMeter()
    meter.state = state
    lines = meter.legend_lines()
    assert "earlier: 20" in lines and "tools: 30" in lines
    assert lines[0].startswith("65 of 2,048 tokens used")
