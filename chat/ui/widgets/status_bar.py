"""The status bar: model, the conversation's preset, where the model runs, and
the last reply's figures.

From 120 columns it is one long line, as it always was. Narrower, it keeps the
last reply's figures first (first-token time, tokens/s, reused and evaluated
tokens, the seed), then "not saving", then the rest while they fit, and ends
with "…F1" when something is left out; F1 or a click lists everything."""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from textual.content import Content
from textual.timer import Timer
from textual.widgets import Static

from chat.conversations.conversation import ReplyStats
from chat.engine.protocol import ModelInfo, PromptProgress
from chat.sanitize import sanitize
from chat.session.prompt_progress import SHOW_AFTER_S, progress_text
from chat.ui.widgets.message_view import FINISH_NOTES, cache_summary, reply_summary

WIDE = 118
"""Content width of a 120-column terminal: from there, the long form."""
MORE = "…F1"
"""Said at the end of a bar that left something out: F1 lists it."""


class StatusBar(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self._model = "no model"
        self._device = ""
        self._reply = ""
        self._not_saving = ""
        self._progress: PromptProgress | None = None
        """The prompt being evaluated, while it is."""
        self._progress_due = False
        self._progress_timer: Timer | None = None
        self._preset = ""
        self._stats: ReplyStats | None = None

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
        self._end_progress()  # after a failed reply too
        self._render_bar()

    def show_no_model(self, text: str = "no model") -> None:
        self._model = text
        self._device = ""
        self._render_bar()

    def on_resize(self) -> None:
        self._render_bar()

    async def on_click(self) -> None:
        await self.run_action("screen.context_help")

    def show_generating(self) -> None:
        self._stats = None
        self._reply = "generating… (Esc to stop)"
        self._end_progress()
        self._render_bar()

    def show_prompt_progress(self, progress: PromptProgress) -> None:
        """The prompt is being evaluated: shown in place of "generating…" once
        that has taken `SHOW_AFTER_S` (a short prompt shows nothing), until its
        last batch is done."""
        reading = progress.done < progress.total
        if reading and self._progress is None:
            self._progress_due = False
            # Drawn then if no batch ends before: on a CPU one batch takes seconds.
            self._progress_timer = self.set_timer(SHOW_AFTER_S, self._progress_is_due)
        if reading:
            self._progress = progress
        else:
            self._end_progress()
        self._render_bar()

    def _end_progress(self) -> None:
        self._progress = None
        if self._progress_timer is not None:
            self._progress_timer.stop()
            self._progress_timer = None

    def _progress_is_due(self) -> None:
        self._progress_due = True
        self._render_bar()

    def show_no_reply(self) -> None:
        """No reply to show (one failed, or the conversation has none): neither
        "generating…" nor its progress nor an earlier reply's figures stay."""
        self._end_progress()
        self._stats = None
        self._reply = ""
        self._render_bar()

    def show_stopped_reading(self) -> None:
        """Esc while the prompt was read: no reply; what was read stays in the cache."""
        self._end_progress()
        self._stats = None
        self._reply = "stopped while reading the prompt · Ctrl+L answers the message"
        self._render_bar()

    def show_reply(self, stats: ReplyStats) -> None:
        note = FINISH_NOTES[stats.finish_reason]
        self._stats = stats
        self._reply = "last: " + reply_summary(stats) + (f" · {note}" if note else "")
        self._end_progress()
        self._render_bar()

    def show_preset(self, name: str) -> None:
        """The conversation's preset ("" for none)."""
        # A name read back from a database: one line, never a control character.
        shown = " ".join(sanitize(name).split())
        self._preset = f"preset {shown}" if shown else ""
        self._render_bar()

    def show_not_saving(self, reason: str | None) -> None:
        """Conversations are not being saved (None: they are again); stays until fixed."""
        self._not_saving = f"⚠ not saving: {reason}" if reason else ""
        self.set_class(bool(reason), "not-saving")
        self._render_bar()

    def _progress_text(self) -> str:
        progress = self._progress
        if progress is None or not self._progress_due:
            return ""
        return f"{progress_text(progress)} · Esc stops"

    def _render_bar(self) -> None:
        # The bar's size never depends on its text (a row, the screen's width:
        # app.tcss): drawn without a layout, which in Textual arranges every
        # widget on the screen again (5-10 ms), for each line of prompt
        # progress too (docs/performance.md, "the bars draw without a layout").
        width = self.content_size.width
        if width and width < WIDE:
            self.update(Content(self._compact_text(width)), layout=False)
            return
        # Model names come from GGUF metadata: plain Content, never markup.
        # The last reply's figures before the device: a narrow terminal cuts
        # off the end of the bar, and the device does not change.
        shown = (self._not_saving, self._model, self._preset, self._reply, self._device)
        reading = self._progress_text()
        if reading:
            # First, where a narrow terminal does not cut it off; "generating…" goes.
            shown = (reading, *shown[:3], shown[4])
        parts = [p for p in shown if p]
        self.update(Content(_fitted(parts, width)), layout=False)

    def _compact_parts(self) -> list[str]:
        """What the bar shows, most wanted first."""
        stats = self._stats
        reading = self._progress_text()
        if reading:
            parts = [reading]
        elif stats is not None:
            note = FINISH_NOTES[stats.finish_reason]
            parts = [
                f"first {stats.ttft_s:.2f} s",
                f"{stats.decode_tps:.1f} tok/s" if stats.has_decode_rate else "",
                f"reused {stats.prompt_reused:,} · eval {stats.prompt_evaluated:,}",
                f"seed {stats.seed}",
                note,
            ]
        else:
            parts = [self._reply]
        if self._not_saving:
            parts.insert(5 if stats is not None and not reading else 1, "⚠ not saving")
        return [part for part in (*parts, self._model, self._preset, self._device) if part]

    def _compact_text(self, width: int) -> str:
        """As many parts as fit in `width`, in order, and "…F1" if one is left out."""
        parts = self._compact_parts()
        shown: list[str] = []
        for index, part in enumerate(parts):
            candidate = " · ".join([*shown, part])
            last = index == len(parts) - 1
            needed = cell_len(candidate) + (0 if last else cell_len(" " + MORE))
            if needed > width:
                if not shown:
                    return _first_phrases(part, width)
                more = " ".join([" · ".join(shown), MORE])
                return more if cell_len(more) <= width else MORE
            shown.append(part)
        return " · ".join(shown)

    def full_lines(self) -> list[str]:
        """Everything the bar knows, one item a line, for the help screen (F1)."""
        lines = [self._progress_text(), self._reply]
        if self._stats is not None:
            lines.append(cache_summary(self._stats))
        lines += [self._not_saving, self._model, self._preset, self._device]
        return [line for line in lines if line]

    def full_text(self) -> str:
        """Everything the bar knows on one line, whatever the terminal's width."""
        return "  │  ".join(self.full_lines())


def _first_phrases(part: str, width: int) -> str:
    """A part too wide for the bar alone (the prompt's progress in 80
    columns), as many of its phrases as fit, and "…F1": rather than "…F1"
    alone, which showed nothing of it for as long as the prompt was read."""
    phrases = part.split(" · ")
    for count in range(len(phrases) - 1, 0, -1):
        text = " ".join([" · ".join(phrases[:count]), MORE])
        if cell_len(text) <= width:
            return text
    room = width - cell_len(" " + MORE)
    if room <= 0:
        return MORE
    return " ".join([set_cell_size(part, room).rstrip(), MORE])


def _fitted(parts: list[str], width: int) -> str:
    """`parts` side by side; where they do not all fit in `width` (a long
    model name, a server's address, the device line), cut at the width and
    ended with "…F1", as the compact bar ends: the terminal would cut the
    last part mid-phrase with no sign that more is in the help."""
    text = "  │  ".join(parts)
    if not width or cell_len(text) <= width:
        return text
    kept = set_cell_size(text, max(0, width - cell_len(MORE))).rstrip(" │")
    return kept + MORE
