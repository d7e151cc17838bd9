"""The status bar: model, where it runs, and the last reply's figures."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from chat.conversations.conversation import ReplyStats
from chat.engine.base import ModelInfo
from chat.ui.widgets.message_view import FINISH_NOTES, reply_summary


class StatusBar(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self._model = "no model"
        self._device = ""
        self._reply = ""
        self._not_saving = ""

    def show_loading(self, doing: str) -> None:
        """`doing`: "Loading model NAME" or "Connecting to SERVER"."""
        self._model = f"{doing}…"
        self._device = ""
        self._render_bar()

    def show_reloading(self, doing: str) -> None:
        """`doing`: "Reloading model NAME" or "Connecting to SERVER"."""
        self._model = f"{doing}…"
        self._device = ""
        self._render_bar()

    def show_model(self, info: ModelInfo) -> None:
        self._model = f"{info.name} · {info.n_ctx:,} ctx"
        self._device = info.device_text()
        self._render_bar()

    def show_no_model(self, text: str = "no model") -> None:
        self._model = text
        self._device = ""
        self._render_bar()

    def show_generating(self) -> None:
        self._reply = "generating… (Esc to stop)"
        self._render_bar()

    def show_reply(self, stats: ReplyStats) -> None:
        note = FINISH_NOTES[stats.finish_reason]
        self._reply = "last: " + reply_summary(stats) + (f" · {note}" if note else "")
        self._render_bar()

    def show_not_saving(self, reason: str | None) -> None:
        """Conversations are not being saved (None: they are again); stays until fixed."""
        self._not_saving = f"⚠ not saving: {reason}" if reason else ""
        self.set_class(bool(reason), "not-saving")
        self._render_bar()

    def _render_bar(self) -> None:
        # Model names come from GGUF metadata: plain Content, never markup.
        parts = [p for p in (self._not_saving, self._model, self._device, self._reply) if p]
        self.update(Content("  │  ".join(parts)))
