"""What Textual itself costs to stream the same reply, beside kvchat's UI.

The UI row's target (0.04 CPU-s per 100 tokens) is measured against two
anchors, each a bare Textual app in the same 120x40 pseudo-terminal, handed
the app's own reply (its text, over the time it took, 15 deliveries a
second as kvchat's pacer hands it over; chat.bench.textual_floor_app):
- the floor: one row of text changed each delivery, above an input box, the
  least any Textual app pays to show streamed text at that pace;
- Textual's own Markdown stream (`Markdown.get_stream`), the way Textual
  offers to stream a reply as Markdown.
The CPU counted is the same as the app's row: every thread of the process
but the one that hands the text over (the engine's stand-in)."""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from chat.bench.app_terminal import Terminal
from chat.bench.rows import Options, Row
from chat.bench.terminal import TerminalReply, thread_cpu, thread_names
from chat.bench.textual_floor_app import FEEDER_NAME, READY_MARK
from chat.bench.ui_cost import UI_CPU_TARGET

START_KEY = b"\x14"
"""Ctrl+T: the floor app's key to start the deliveries."""


@dataclass(frozen=True)
class FloorRun:
    ui_cpu_s: float
    frames: int
    wall_s: float

    def per_100_tokens(self, tokens: int) -> float:
        return self.ui_cpu_s / tokens * 100

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.wall_s if self.wall_s else 0.0


def stream_in_floor_app(
    variant: str, reply: TerminalReply, env: dict[str, str], timeout: float = 120
) -> FloorRun:
    """`reply`'s text handed to the floor app `variant` over the time it
    streamed in the app (its tokens at its decode rate)."""
    scratch = Path(tempfile.mkdtemp(prefix="kvchat-floor-"))
    text_file, done = scratch / "reply.txt", scratch / "done"
    text_file.write_text(reply.text, encoding="utf-8")
    seconds = run_seconds(reply)
    argv = [sys.executable, "-m", "chat.bench.textual_floor_app", variant, str(text_file)]
    terminal = Terminal([*argv, f"{seconds:.3f}", str(done)], env)
    pid = terminal.pid
    try:
        terminal.wait_for(READY_MARK, timeout)
        settled = time.monotonic() + 0.5  # the first frames: mounting, the anchor
        terminal.wait_until(lambda: time.monotonic() > settled, timeout)
        before, drawn, started = thread_cpu(pid), len(terminal.screen), time.monotonic()
        terminal.send(START_KEY)
        terminal.wait_until(done.exists, timeout)
        wall = time.monotonic() - started
        after, names = thread_cpu(pid), thread_names(pid)
        frames = terminal.frames_since(drawn)
    finally:
        terminal.close()
    ui_cpu = sum(
        cpu - before.get(tid, 0.0) for tid, cpu in after.items() if names.get(tid) != FEEDER_NAME
    )
    return FloorRun(ui_cpu, frames, wall)


VARIANTS = {
    "line": "UI floor: a bare Textual app redrawing one line, same text and pace",
    "markdown": "UI of Textual's own Markdown stream, same text and pace",
}


def floor_rows(options: Options, env: dict[str, str], reply: TerminalReply) -> list[Row]:
    """The two anchors for `reply` (the app's run whose UI cost least, as
    the UI row takes); each the least of its rounds, as the app's row is."""
    rounds = 1 if options.quick else 3
    rows = []
    for variant in VARIANTS:
        runs = [stream_in_floor_app(variant, reply, env) for _ in range(rounds)]
        rows.append(floor_row(variant, min(runs, key=lambda run: run.ui_cpu_s), reply))
    return rows


def floor_row(variant: str, run: FloorRun, reply: TerminalReply) -> Row:
    """`run` of the floor app `variant`, beside kvchat's `reply`."""
    cost = run.per_100_tokens(reply.tokens)
    app = reply.ui_cpu_per_100_tokens
    note = (
        f"kvchat's UI {app / cost:.3g}x this; " if cost else ""
    ) + f"{run.frames_per_s:.3g} frames/s, {reply.tokens} tokens over {run_seconds(reply):.2f} s"
    if variant == "line" and cost:
        note += f"; the UI row's target {UI_CPU_TARGET} is {UI_CPU_TARGET / cost:.2g}x this"
    return Row(VARIANTS[variant], cost, "CPU-s / 100 tok", note=note)


def run_seconds(reply: TerminalReply) -> float:
    """How long the reply streamed: its tokens at its decode rate."""
    return reply.tokens / reply.decode_tps
