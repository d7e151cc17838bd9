"""A thinking budget: after so many tokens of thinking, the block is closed
for the model, and it answers.

The engine feeds each sampled token's text; once the thinking (its opening
marker included, as the meter counts it) reaches the budget, `feed` returns
the tokens that close the block as the model's template writes it (the
closing marker, then what separates it from the answer). The engine puts
them in the reply as if sampled and goes on sampling after them from the KV
cache: nothing before them is evaluated again. See docs/reasoning.md.
"""

from __future__ import annotations

from collections.abc import Callable

from chat.conversations.conversation import TokenChoice
from chat.engine.reasoning.markers import Reasoning
from chat.engine.reasoning.splitter import ThinkingSplitter


class ThinkingBudget:
    def __init__(self, reasoning: Reasoning, most: int, tokenize: Callable[[bytes], list[int]]):
        """`most`: the thinking's tokens at most; `tokenize`: text to token ids,
        special tokens parsed (a closing marker may be one)."""
        self._splitter = ThinkingSplitter(reasoning.markers, reasoning.prompt_opens_block)
        self._markers = reasoning.markers
        self.most = most
        self._tokenize = tokenize
        self.spent = False
        """The budget was reached (once: the block is closed once at most)."""

    def feed(self, text: str) -> list[int]:
        """One sampled token's text. Returns the tokens that close the block
        when this token spent the budget, else none. Never inside a marker
        being written (its text is held back until it is known)."""
        splitter = self._splitter
        splitter.feed(text, 1)
        if (
            self.spent
            or not splitter.in_thinking
            or splitter.holding
            or splitter.thinking_tokens < self.most
        ):
            return []
        self.spent = True
        markers = self._markers
        before = "" if splitter.thinking.endswith("\n") else "\n"
        after = markers.answer_leads[0] if markers.answer_leads else "\n\n"
        return self._tokenize(f"{before}{markers.close}{after}".encode())


def forced_choice(token_id: int, text: str) -> TokenChoice:
    """The token view's record of a token kvchat put in the reply (a budget's
    closing marker): chosen for certain, with no distribution of the model's."""
    return TokenChoice(
        token_id=token_id,
        text=text,
        prob=1.0,
        raw_prob=1.0,
        top=[(text, 1.0)],
        raw_top=[],
        greedy=True,
    )
