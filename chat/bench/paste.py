"""A paste that arrives as keystrokes: `chat --model MODEL` in a pseudo-terminal
is sent text as a terminal without bracketed paste sends it, one byte per
character, as fast as the app reads.

Linear means the cost per character stays the same as the paste grows: the
row compares it at two lengths, measured in the same run. And Ctrl+Q pressed
during a long paste must be handled at once, not after the paste."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from chat.bench.app_terminal import Terminal
from chat.bench.rows import Options, Row
from chat.bench.startup import MODEL_READY_MARK, installed_python_env

CTRL_Q = b"\x11"
LINE = "The keeper climbed the stairs again to light the lamp, café au lait in hand. "


def paste_text(characters: int, mark: str) -> str:
    """`characters` of prose in lines (Ctrl+J, a new line in the box), ending in `mark`."""
    body = ((LINE * 3 + "\n") * (characters // len(LINE) + 1))[: characters - len(mark) - 1]
    return f"{body}\n{mark}"


def paste_seconds(terminal: Terminal, characters: int) -> float:
    """Seconds from the first keystroke to the last one on screen."""
    mark = f"END-{characters}"
    started = time.perf_counter()
    terminal.type_in_background(paste_text(characters, mark))
    terminal.wait_for(mark.encode())
    return time.perf_counter() - started


def paste_rows(options: Options) -> list[Row]:
    env = installed_python_env(Path(tempfile.mkdtemp(prefix="kvchat-bench-")))
    short, long = (1_000, 10_000) if options.quick else (2_000, 20_000)
    terminal = Terminal.chat(options.model, env)
    try:
        terminal.wait_for(MODEL_READY_MARK)
        short_s = paste_seconds(terminal, short)
        long_s = paste_seconds(terminal, long)  # after the short one, still in the box
    finally:
        terminal.close()
    # Ctrl+Q a moment into a long paste, in a fresh app.
    quit_during = 50_000 if options.quick else 200_000
    terminal = Terminal.chat(options.model, env)
    try:
        terminal.wait_for(MODEL_READY_MARK)
        terminal.type_in_background(paste_text(quit_during, "END"))
        time.sleep(0.5)
        terminal.send(CTRL_Q)
        quit_s = terminal.seconds_to_exit(120)
    finally:
        terminal.close()
    per_char_short = short_s / short
    per_char_long = long_s / long
    ratio = per_char_long / per_char_short
    return [
        Row(
            f"paste as keystrokes, {long:,} characters",
            long_s,
            "s",
            note=f"{per_char_long * 1e6:.0f} µs a character; no bracketed paste",
        ),
        Row(
            f"paste as keystrokes: cost a character at {long:,} / at {short:,}",
            ratio,
            "x",
            "< 2x (linear)",
            ratio < 2,
        ),
        Row(
            f"Ctrl+Q 0.5 s into a {quit_during:,}-character keystroke paste, to exit",
            quit_s,
            "s",
            "< 3 s",
            quit_s < 3,
        ),
    ]
