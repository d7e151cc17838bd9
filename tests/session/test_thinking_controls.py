"""Thinking on or off and the budget, per conversation (issue 29 point 4):
the session's own copy of the settings, saved with the conversation; the
engine told before every count; what a model cannot honour said in words.
Scripted engine and a real database (the real model: tests/ui/screens/test_thinking_controls.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chat.conversations.store import Store
from chat.engine.reasoning.markers import THINK, Reasoning
from chat.session.thinking_controls import (
    local_thinking_notes,
    set_thinking_budget,
    switch_thinking,
    thinking_notes,
)
from tests.fakes import ScriptedEngine
from tests.session.test_chat_session import one_turn, session_with

QWEN3_LIKE = Reasoning(THINK, "template", False, "enable_thinking")
R1_LIKE = Reasoning(THINK, "template", True)


def test_switching_thinking_is_this_conversations_and_saved_with_it(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    engine.info = replace(engine.info, reasoning=QWEN3_LIKE)
    with Store(tmp_path / "c.db") as store:
        session = session_with(store, engine)
        one_turn(session, "Hi", "Hello")
        notice = switch_thinking(session)
        assert notice == "Thinking is off for this conversation."
        assert session.defaults.sampling.thinking  # new conversations still think
        assert not session.settings.sampling.thinking
        # The engine renders the next prompt with thinking off: told at the next count.
        assert session.plan("More?") is not None and engine.thinking is False
        conv_id = session.conversation.id
        assert conv_id is not None
        assert store.get_sampling(conv_id)["thinking"] is False
        assert set_thinking_budget(session, 1024) == (
            "Thinking is on for this conversation, at most 1,024 tokens of it."
        )
        assert store.get_sampling(conv_id)["thinking_budget"] == 1024
        session.new_conversation()
        session.plan("New")
        assert engine.thinking is True


def test_what_a_model_cannot_honour_is_said() -> None:
    engine = ScriptedEngine()
    session = session_with(None, engine)
    # The scripted model does not think.
    assert switch_thinking(session) == (
        "Thinking is off for this conversation. Ignored: this model does not think "
        "(its chat template has no thinking block)."
    )
    engine.info = replace(engine.info, reasoning=R1_LIKE)
    assert local_thinking_notes(engine.info) == {
        "sampling.thinking": "Ignored: this model's chat template cannot turn its thinking off.",
        "sampling.keep_thinking": "Ignored: this model's chat template opens the thinking in "
        "the prompt, so earlier thinking cannot be sent back as it was sampled.",
    }
    assert local_thinking_notes(replace(engine.info, reasoning=QWEN3_LIKE)) == {}
    served = replace(engine.info, kind="openai", reasoning=None)
    assert local_thinking_notes(served) == {}
    notes = thinking_notes(served, frozenset({"thinking", "thinking_budget"}))
    assert notes["sampling.thinking_budget"] == "Ignored by openai: its API cannot ask for it."
