"""What the UI costs while a reply streams, beyond the first reply's prose
(chat.bench.machine measures that one): the same reply as the 40th of a
conversation (its row: the ratio to the first, target <= 1.2), and a reply
that is a fenced code block (its row: the same target as prose, with the
ratio to the first reply's prose, measured in the same run, in its note).

The 40th reply's earlier turns are not streamed (too slow): a conversation of
short turns is written as a JSON list of messages, imported with
`chat --import`, and the app opens it with `--resume`, so the turns are on
screen and in the prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chat.bench.rows import Options, Row
from chat.bench.terminal import TerminalReply, stream_in_terminal
from chat.paths import DATA_DIR_ENV

UI_CPU_TARGET = 0.04
"""CPU-s per 100 streamed tokens the UI may use (issue 33): the first
reply's row (chat.bench.machine), the code block's, and the floor rows'
notes (chat.bench.textual_floor)."""
REPLY_NUMBER = 40
"""The measured reply's place in the conversation."""
IMPORTED_TURNS = REPLY_NUMBER - 2
"""The warm-up reply (the app's first, as in the first reply's run) is the 39th."""
WARM_UP = "Note 39: what did the keeper log next? Answer in one line."
CODE = (
    "Write a Python program of about 100 lines that simulates a lighthouse keeper's log: "
    "classes, functions and a main. Answer with the code only, in one fenced code block."
)
FENCE = "```"
RATIO_TARGET = 1.2


def earlier_turns(turns: int = IMPORTED_TURNS) -> list[dict[str, str]]:
    """Short user/assistant turns, about 45 tokens each with the demo model's
    template: 38 of them and the two measured replies fit its window."""
    messages = []
    for n in range(1, turns + 1):
        messages.append({"role": "user", "content": f"Note {n}: what did the keeper log?"})
        messages.append(
            {
                "role": "assistant",
                "content": f"At hour {n} the keeper logged the tide, the wind and a passing ship.",
            }
        )
    return messages


def import_conversation(env: dict[str, str], messages: list[dict[str, str]]) -> int:
    """`messages` imported with `chat --import` into `env`'s data folder; its id."""
    path = Path(env[DATA_DIR_ENV]) / "bench-earlier-turns.json"
    path.write_text(json.dumps(messages))
    done = subprocess.run(
        [sys.executable, "-m", "chat", "--import", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(done.stdout.split()[-1])


def ui_cost_rows(options: Options, env: dict[str, str], first: float) -> list[Row]:
    """`first`: the first reply's UI CPU per 100 tokens, prose, in this run."""
    rounds = 1 if options.quick else 3
    # Each round imports the turns again: a round's two replies stay on the
    # conversation it opened, and the next would measure the 42nd.
    deep = [
        stream_in_terminal(
            options.model,
            env,
            options.tokens,
            first_prompt=WARM_UP,
            resume=import_conversation(env, earlier_turns()),
        )
        for _ in range(rounds)
    ]
    code = [
        stream_in_terminal(options.model, env, options.tokens, prompt=CODE) for _ in range(rounds)
    ]
    return [depth_row(first, _least(deep)), code_row(first, _least(code))]


def _least(runs: list[TerminalReply]) -> TerminalReply:
    """The run whose UI cost least, as the first reply's row takes its least."""
    return min(runs, key=lambda each: each.ui_cpu_per_100_tokens)


def depth_row(first: float, deep: TerminalReply) -> Row:
    ratio = deep.ui_cpu_per_100_tokens / first if first else None
    return Row(
        f"UI CPU at the {REPLY_NUMBER}th reply / the first",
        ratio,
        "x",
        f"<= {RATIO_TARGET}",
        None if ratio is None else ratio <= RATIO_TARGET,
        f"{deep.ui_cpu_per_100_tokens:.3g} CPU-s / 100 tok, {deep.frames_per_s:.3g} frames/s; "
        f"{IMPORTED_TURNS} imported turns, a {deep.prompt_tokens}-token prompt",
    )


def code_row(prose: float, code: TerminalReply) -> Row:
    ratio = code.ui_cpu_per_100_tokens / prose if prose else None
    fenced = "" if FENCE in code.text else "; the reply had no fenced code block"
    return Row(
        "UI CPU while a code block streams",
        code.ui_cpu_per_100_tokens,
        "CPU-s / 100 tok",
        f"<= {UI_CPU_TARGET}",
        code.ui_cpu_per_100_tokens <= UI_CPU_TARGET,
        ("" if ratio is None else f"{ratio:.3g}x prose, ")
        + f"{code.frames_per_s:.3g} frames/s, {code.tokens} tokens{fenced}",
    )
