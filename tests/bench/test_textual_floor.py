"""The floor rows (chat.bench.textual_floor): bare Textual apps handed the
app's reply at its pace in a real pseudo-terminal, and the rows beside
kvchat's UI."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat.bench.startup import installed_python_env
from chat.bench.terminal import TerminalReply
from chat.bench.textual_floor import VARIANTS, FloorRun, floor_row, stream_in_floor_app

REPLY = (
    "The keeper climbed the stairs at dusk.\n\n"
    "He lit the **lamp**, wrote the tide in his log and watched a ship pass. " * 3
)


def reply(ui_cpu_s: float = 0.2, tokens: int = 60, decode_tps: float = 60.0) -> TerminalReply:
    return TerminalReply(decode_tps, tokens, ui_cpu_s, 1.0, 1.0, 500.0, 15, text=REPLY)


def test_a_floor_row_is_the_floor_apps_cost_beside_kvchats() -> None:
    line = floor_row("line", FloorRun(ui_cpu_s=0.02, frames=15, wall_s=1.0), reply(0.06))
    assert line.name == VARIANTS["line"] and line.unit == "CPU-s / 100 tok"
    assert line.value is not None and abs(line.value - 0.02 / 60 * 100) < 1e-9
    assert line.ok is None and line.target == ""  # an anchor, not a target
    assert line.note.startswith("kvchat's UI 3x this; 15 frames/s, 60 tokens over 1.00 s")
    assert line.note.endswith("the UI row's target 0.04 is 1.2x this")
    markdown = floor_row("markdown", FloorRun(0.06, 15, 1.0), reply(0.06))
    assert markdown.note.startswith("kvchat's UI 1x this") and "target" not in markdown.note
    idle = floor_row("line", FloorRun(0.0, 0, 1.0), reply())
    assert idle.value == 0.0 and "x this" not in idle.note


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_floor_app_streams_the_reply_at_its_pace_and_counts_its_ui(
    variant: str, tmp_path: Path
) -> None:
    env = installed_python_env(tmp_path)
    run = stream_in_floor_app(variant, reply(), env)
    # 60 tokens at 60 tok/s: a second of deliveries, 15 a second, then the end.
    assert 1.0 <= run.wall_s < 10
    assert run.frames >= 8
    assert 0 < run.ui_cpu_s < run.wall_s
