"""A bare Textual app that is handed a reply's text as kvchat's screen is
(15 deliveries a second, over the time the reply took), for the benchmark's
floor rows (chat.bench.textual_floor). Not part of kvchat's UI.

    python -m chat.bench.textual_floor_app VARIANT TEXT_FILE SECONDS DONE_FILE

VARIANT "line": one row of text above an input box; each delivery sets the
row to the end of the text so far. The least a frame can change: what any
Textual app pays to draw a frame of streamed text.
VARIANT "markdown": Textual's own Markdown widget in an anchored scroll view,
fed through `Markdown.get_stream` (Textual's `MarkdownStream`, its way to
stream a reply as Markdown).

It shows READY_MARK once it can start; Ctrl+T starts the deliveries; once
the last one has been drawn it writes DONE_FILE. The thread that hands the
text over stands in for the engine: it names itself FEEDER_NAME so that its
CPU is not counted as the UI's."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Input, Markdown, Static
from textual.widgets.markdown import MarkdownStream

READY_MARK = b"floor ready"
FEEDER_NAME = b"floor-feeder"
DELIVERIES_PER_S = 15
"""kvchat's pace while a reply streams (chat.runtime.frame_pacing's most)."""
DONE_AFTER_S = 0.3
"""Time for the last delivery's frame, after which the run ends."""


class FloorApp(App[None]):
    CSS = """
    #line { height: 1; }
    #reply { height: 1fr; }
    """
    BINDINGS = [Binding("ctrl+t", "start", priority=True)]

    def __init__(self, variant: str, text: str, seconds: float, done: Path) -> None:
        super().__init__()
        self._variant, self._text, self._seconds, self._done = variant, text, seconds, done
        self._markdown_stream: MarkdownStream | None = None

    def compose(self) -> ComposeResult:
        if self._variant == "line":
            yield VerticalScroll(id="reply")  # the empty conversation above the line
            yield Static(READY_MARK.decode(), id="line")
        else:
            with VerticalScroll(id="reply"):
                yield Static(READY_MARK.decode())
                yield Markdown(id="markdown")
        # kvchat's prompt box keeps its cursor lit while a reply streams.
        yield Input(placeholder="Message", id="prompt")

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = False
        if self._variant == "markdown":
            self.query_one("#reply", VerticalScroll).anchor()
            self._markdown_stream = Markdown.get_stream(self.query_one(Markdown))

    def action_start(self) -> None:
        threading.Thread(target=self._feed, daemon=True).start()

    def _feed(self) -> None:
        """Hand the text over in even slices of time, as the engine's pacer does."""
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None).prctl(15, FEEDER_NAME)  # PR_SET_NAME
        deliveries = max(1, round(self._seconds * DELIVERIES_PER_S))
        started, sent = time.monotonic(), 0
        for n in range(1, deliveries + 1):
            time.sleep(max(0.0, started + n / DELIVERIES_PER_S - time.monotonic()))
            upto = len(self._text) * n // deliveries
            # (mypy cannot solve call_from_thread's result type for a coroutine function)
            self.call_from_thread(self._deliver, self._text[sent:upto], upto)  # type: ignore[arg-type]
            sent = upto
        self.call_from_thread(self.set_timer, DONE_AFTER_S, self._finish)
        threading.Event().wait()  # stays, so that its CPU is still read as its own

    async def _deliver(self, text: str, upto: int) -> None:
        if self._markdown_stream is not None:
            if text:
                await self._markdown_stream.write(text)
        else:
            # The end of the last line so far, without copying the text before it.
            line_start, width = self._text.rfind("\n", 0, upto) + 1, self.size.width
            last_line = self._text[max(line_start, upto - width) if width else line_start : upto]
            self.query_one("#line", Static).update(last_line, layout=False)

    def _finish(self) -> None:
        self._done.write_text("done")


def main() -> None:
    variant, text_file, seconds, done = sys.argv[1:5]
    text = Path(text_file).read_text(encoding="utf-8")
    FloorApp(variant, text, float(seconds), Path(done)).run()


if __name__ == "__main__":
    main()
