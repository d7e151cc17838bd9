"""Thinking on or off and the thinking budget, per conversation: what a
model (or the server it runs on) can honour of them, in words. No Textual.

The settings are `sampling.thinking` and `sampling.thinking_budget`
(chat.settings.schema): sampling settings, so saved with each conversation.
How the engines honour them is in docs/reasoning.md.
"""

from __future__ import annotations

from chat.engine.protocol import ModelInfo
from chat.session.chat_session import ChatSession

THINKING = "sampling.thinking"
BUDGET = "sampling.thinking_budget"
KEEP = "sampling.keep_thinking"


def local_thinking_notes(info: ModelInfo) -> dict[str, str]:
    """Notes for the settings pane on the thinking settings a model loaded in
    kvchat cannot honour (a model server's are its `ignored_settings`)."""
    if info.kind != "local":
        return {}
    reasoning = info.reasoning
    if reasoning is None:
        note = "Ignored: this model does not think (its chat template has no thinking block)."
        return {THINKING: note, BUDGET: note, KEEP: note}
    notes = {}
    if reasoning.switch is None:
        notes[THINKING] = "Ignored: this model's chat template cannot turn its thinking off."
    if reasoning.prompt_opens_block:
        # Its replies were sampled inside a block the prompt opened: sent back
        # whole, they would lack the opening the template never writes for them.
        notes[KEEP] = (
            "Ignored: this model's chat template opens the thinking in the prompt, "
            "so earlier thinking cannot be sent back as it was sampled."
        )
    return notes


def thinking_notes(info: ModelInfo, ignored: frozenset[str]) -> dict[str, str]:
    """Each thinking setting the model in use cannot honour, with why:
    `ignored` is a model server's `ignored_settings`."""
    notes = local_thinking_notes(info)
    for key in (THINKING, BUDGET, KEEP):
        if key.split(".", 1)[1] in ignored:
            notes[key] = f"Ignored by {info.kind}: its API cannot ask for it."
    return notes


def thinking_state(
    info: ModelInfo | None, ignored: frozenset[str], enabled: bool, budget: int
) -> str:
    """How this conversation's replies think, in one sentence, for a notice;
    what the model in use cannot honour of it is said too."""
    limit = f", at most {budget:,} tokens of it" if budget else ""
    state = f"Thinking is {'on' if enabled else 'off'} for this conversation{limit}."
    if info is None:
        return state
    notes = thinking_notes(info, ignored)
    relevant = [THINKING] if not enabled else [BUDGET] if budget else []
    reasons = [notes[key] for key in relevant if key in notes]
    return " ".join([state, *reasons])


BUDGETS = (256, 1024, 4096)
"""The budgets the command palette offers (any other is set in the settings pane)."""


def switch_thinking(session: ChatSession) -> str:
    """Thinking on when it is off, off when it is on, for the conversation
    shown; the notice to show."""
    return _change(session, thinking=not session.settings.sampling.thinking)


def set_thinking_budget(session: ChatSession, budget: int) -> str:
    """At most `budget` tokens of thinking (0: no limit), thinking on, for the
    conversation shown; the notice to show."""
    return _change(session, thinking=True, thinking_budget=budget)


def _change(session: ChatSession, **values: object) -> str:
    session.change_sampling(**values)
    sampling = session.settings.sampling
    engine = session.engine
    info = engine.info if engine is not None else None
    ignored: frozenset[str] = getattr(engine, "ignored_settings", frozenset())
    return thinking_state(info, ignored, sampling.thinking, sampling.thinking_budget)
