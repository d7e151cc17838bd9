"""A block shown as one line while folded ("▸ summary") and with its whole
text below that line unfolded ("▾ summary"); a click folds and unfolds it.
A reasoning model's thinking (chat.ui.widgets.thinking_block) and a tool
call (chat.ui.widgets.tool_call_block) are such blocks.

What a block shows is untrusted text: `unfolded_text` returns it already
sanitised, and the block draws it as `Content` (never markup).
"""

from __future__ import annotations

from textual import events
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static


class FoldedBlock(Static):
    folded: reactive[bool] = reactive(True)

    def summary(self) -> str:
        """The one line shown folded or not, after the mark."""
        raise NotImplementedError

    def unfolded_text(self) -> str:
        """What unfolding shows below the summary, sanitised ("" for nothing)."""
        return ""

    def watch_folded(self) -> None:
        self._draw()

    def on_mount(self) -> None:
        self._draw()

    def _draw(self) -> None:
        mark = "▸" if self.folded else "▾"
        line = f"{mark} {self.summary()}"
        text = "" if self.folded else self.unfolded_text()
        if text:
            line += "\n" + text
        self.update(Content(line))

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.folded = not self.folded
