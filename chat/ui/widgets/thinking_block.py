"""A reasoning model's thinking, above its answer: one line while folded
("▸ Thinking · 412 tokens · 3.1 s"), the whole text below it unfolded. While
the model thinks the line counts up live. A click, or alt+t on the chat
screen, folds and unfolds it; `ui.show_thinking` says how it starts.

The thinking is the model's text like the answer, untrusted: it is shown as
plain text (no markup, no links), its escape sequences removed.
"""

from __future__ import annotations

import time

from chat.sanitize import sanitize
from chat.ui.widgets.folded_block import FoldedBlock
from chat.wording import counted


class ThinkingBlock(FoldedBlock):
    DEFAULT_CSS = """
    ThinkingBlock {
        height: auto;
        color: $text-muted;
        padding: 0 0 1 0;
        display: none;
    }
    ThinkingBlock:hover {
        color: $text;
    }
    ThinkingBlock.-shown {
        display: block;
    }
    """

    def __init__(self, thinking: str, tokens: int, seconds: float | None, *, folded: bool) -> None:
        super().__init__("", markup=False)
        self._parts = [thinking] if thinking else []
        self.tokens = tokens
        self._seconds = seconds
        self._started: float | None = None
        """While the model thinks: when its first thinking token came."""
        self.set_reactive(ThinkingBlock.folded, folded)
        self.set_class(bool(thinking or tokens), "-shown")

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def thinking_now(self) -> bool:
        """The model is thinking (text came, and no answer yet)."""
        return self._started is not None

    def add(self, text: str, tokens: int) -> None:
        """More of the thinking, as it streams."""
        if self._started is None:
            self._started = time.monotonic()
        if text:
            self._parts.append(text)
        self.tokens += tokens
        self.add_class("-shown")
        self._draw()

    def answer_began(self) -> None:
        """The answer's first text came: the thinking's time is known."""
        if self._started is not None:
            self._seconds = time.monotonic() - self._started
            self._started = None
            self._draw()

    def finish(self, thinking: str, tokens: int, seconds: float | None) -> None:
        """The reply ended: its thinking as kept, and how long it took."""
        self._parts = [thinking] if thinking else []
        self.tokens = tokens
        self._started = None
        if seconds is not None:
            self._seconds = seconds
        self.set_class(bool(thinking or tokens), "-shown")
        self._draw()

    def summary(self) -> str:
        """`Thinking · 412 tokens · 3.1 s`."""
        seconds = self._seconds
        if self._started is not None:
            seconds = time.monotonic() - self._started
        parts = ["Thinking…" if self._started is not None else "Thinking"]
        parts.append(counted(self.tokens, "token"))
        if seconds is not None:
            parts.append(f"{seconds:.1f} s")
        return " · ".join(parts)

    def unfolded_text(self) -> str:
        return sanitize(self.text)
