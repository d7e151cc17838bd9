"""The context meter when a reply is continued (Ctrl+L), with the real demo
model: the plan counts exactly the prompt sent, and the meter shows the same
parts as after the reply (the user's message new, the reply whole as the
reply), not the reply as the new message and the user's as an earlier one."""

from __future__ import annotations

import pytest

from chat.engine.llama import LlamaEngine
from chat.session.turn import TurnStarted
from chat.ui.widgets.context_meter import MeterState
from tests.session.test_thinking_reuse import settings as quiet_settings
from tests.session.test_turn import Recorded

pytestmark = pytest.mark.model


async def test_a_continued_reply_keeps_its_parts_and_is_counted_as_sent(
    engine: LlamaEngine,
) -> None:
    engine.reset()
    chosen = quiet_settings()
    chosen.chat.system_prompt = "You are brief."
    chosen.sampling.max_tokens = 30
    recorded = Recorded(engine, settings=chosen)
    session = recorded.turn.session
    asked = session.plan("Why is the sky blue?")
    reply = await recorded.reply_to("Why is the sky blue?")
    assert asked is not None and reply.stats is not None
    assert reply.stats.finish_reason == "max_tokens" and len(reply.token_ids) == 30
    after_reply = MeterState.from_plan(asked, reply=30)

    plan = session.plan(None)
    assert plan is not None and plan.problem is None
    sent = engine.chat_prompt.tokens(session.reply_prompt(plan, True), False, open_last=True)
    assert plan.used == len(sent)
    continuing = MeterState.from_plan(plan)
    parts = ("system", "history", "new", "reply")
    assert [getattr(continuing, part) for part in parts] == [
        getattr(after_reply, part) for part in parts
    ]
    assert continuing.history == 0  # one exchange: nothing earlier

    assert recorded.turn.continue_reply() is None
    await recorded.turn.stopped()
    (started,) = [e for e in recorded.events if isinstance(e, TurnStarted) and e.kind == "continue"]
    assert started.plan == plan
    stats = recorded.turn.session.conversation.messages[-1].stats
    assert stats is not None and stats.prompt_tokens == len(sent)
