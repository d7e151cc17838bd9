"""Runs the real `chat` command in a pseudo-terminal, with the real demo model,
and presses Ctrl+Q at a chosen kind of moment: the quit test
(test_quit_anytime) drives it, and it runs by hand for many more tries:

    python -m tests.ui.app.quit_driver [RUNS] [--parallel N] [--seed S] [--threads T]

Each run gets its own config and data folders. What the run saw on the screen
when Ctrl+Q went out (the model loading, a reply streaming, the conversation
being counted...) is read from the terminal output, so the figures say which
moments were really hit, not only which were aimed at.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import json
import os
import pty
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from chat.models.files import demo_model_path

CTRL_Q = b"\x11"
CTRL_O = b"\x0f"
F2 = b"\x1bOQ"
ENTER = b"\r"

# What the screen shows, as text written to the terminal.
# The prompt box's placeholder: on every first frame. ("Loading model" is not
# always in the output as one run of bytes: Textual redraws only what changed.)
FIRST_FRAME = b"Enter to send"
MODEL_READY = b" ctx"  # the status bar: "<model> · 8,192 ctx"
GENERATING = b"generating"
REPLY_DONE = b"last: "
COUNTING = b"counting the conversation"
COUNTED = b"8,192 tokens"  # the context meter, once counted
SETTINGS_OPEN = b"Sampling"
BROWSER_OPEN = b"Filter"

MOMENTS = (
    "loading",  # Ctrl+Q while the model loads (or just after)
    "typing",  # while typing, or in the pause that starts a prefill
    "enter",  # right after Enter: the message is saved, the reply starting
    "streaming",  # while the reply streams, or just as it ends and is saved
    "settings",  # with the settings pane (F2) open
    "browser",  # with the conversations browser (Ctrl+O) open
    "counting",  # while a big conversation's tokens are counted
    "counting-enter",  # Enter, then Ctrl+Q, while they are counted
)

MESSAGE = b"Write a long story about a cat who learns to sail."
BIG_CONVERSATION_MESSAGES = 1_500
PREFILL_PAUSE_S = 0.5
"""The pause in typing after which the app evaluates the draft (ChatScreen)."""
QUIT_TIMEOUT_S = 20.0
"""Ctrl+Q must end the process within this (a loaded, shared machine)."""
WAIT_S = 60.0
"""The longest wait for the screen to show something (startup on a busy machine)."""


@dataclass
class QuitRun:
    moment: str
    hit: str
    """What the screen showed when Ctrl+Q went out."""
    exit_code: int | None
    """None: still running `QUIT_TIMEOUT_S` after Ctrl+Q (then killed)."""
    quit_s: float
    """From Ctrl+Q to the end of the process."""
    output: str

    @property
    def problem(self) -> str | None:
        """What went wrong, or None for a clean quit."""
        if self.hit.startswith("never"):
            return f"the screen was {self.hit}"
        if self.exit_code is None:
            return f"still running {QUIT_TIMEOUT_S:.0f} s after Ctrl+Q"
        if self.exit_code != 0:
            return f"exit status {self.exit_code}"
        for word in ("Traceback", "Error"):
            if word in self.output:
                return f"{word!r} in the output"
        return None


class Terminal:
    """A child process on a pseudo-terminal; everything it writes is kept."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        size: tuple[int, int],
        cwd: Path | None = None,
        controlling: bool = False,
    ) -> None:
        """`controlling`: the terminal is the child's controlling terminal, as
        in a terminal emulator or tmux (closing it then sends SIGHUP too)."""
        master, slave = pty.openpty()
        columns, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_take_as_controlling_terminal if controlling else None,
        )
        os.close(slave)
        self._master = master
        self._output = bytearray()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # the child closed the terminal (EIO)
                data = b""
            with self._changed:
                if not data:
                    self._changed.notify_all()
                    return
                self._output += data
                self._changed.notify_all()

    @property
    def output(self) -> bytes:
        with self._changed:
            return bytes(self._output)

    def mark(self) -> int:
        """Where the output is now: `wait_for(..., since=mark)` sees only what follows."""
        with self._changed:
            return len(self._output)

    def wait_for(self, text: bytes, timeout: float = WAIT_S, since: int = 0) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._output.find(text, since) < 0:
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    return False
                self._changed.wait(left)
        return True

    def hang_up(self) -> None:
        """Close the terminal's other end, as a terminal emulator that is gone."""
        os.close(self._master)
        self._master = os.open(os.devnull, os.O_RDONLY)  # for close()

    def send(self, keys: bytes) -> None:
        os.write(self._master, keys)

    def type(self, text: bytes, rng: random.Random) -> None:
        for byte in text:
            self.send(bytes([byte]))
            time.sleep(rng.uniform(0.0, 0.01))

    def wait_exit(self, timeout: float) -> int | None:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(5)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._reader.join(5)
        os.close(self._master)


def _take_as_controlling_terminal() -> None:
    # In the child, a session leader by now: its stdin becomes its terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def folders_env(home: Path, threads: int | None = None) -> dict[str, str]:
    """The environment of one run: every folder kvchat writes to under `home`;
    `threads`: llama.cpp's threads (None: kvchat's default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVCHAT_")}
    if threads is not None:
        env["KVCHAT_MODEL_N_THREADS"] = str(threads)
    env.update(
        KVCHAT_CONFIG_DIR=str(home / "config"),
        KVCHAT_DATA_DIR=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "xdg-config"),
        XDG_DATA_HOME=str(home / "xdg-data"),
        XDG_STATE_HOME=str(home / "xdg-state"),
        XDG_CACHE_HOME=str(home / "xdg-cache"),
        TERM="xterm-256color",
        LANG="C.UTF-8",
        PYTHONFAULTHANDLER="1",  # a crash in C prints where each thread was
    )
    env.pop("TEXTUAL", None)
    return env


def chat_command(model: Path, *extra: str) -> list[str]:
    # Greedy and short: the reply ends within the random window, so quitting
    # just as it is saved is among the moments hit.
    return [
        sys.executable,
        "-m",
        "chat",
        "--model",
        str(model),
        "--temperature",
        "0",
        "--max-tokens",
        "40",
        *extra,
    ]


def make_big_conversation(folder: Path, model: Path, messages: int) -> Path:
    """A database holding one conversation of `messages` messages (imported with
    `chat --import`, as a user would); copy it into a run's data folder."""
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i}: hello there."}
        for i in range(messages)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "big.json"
    source.write_text(json.dumps({"messages": turns}), encoding="utf-8")
    env = folders_env(folder)
    subprocess.run(
        [*chat_command(model), "--import", str(source)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return folder / "data"


def _screen_state(terminal: Terminal, since: int, marks: dict[str, bytes]) -> str:
    """Which of `marks` the screen showed last since `since` ("idle": none;
    "loading": the model is not shown yet), read from the output."""
    out = terminal.output
    if out.find(MODEL_READY) < 0:
        return "loading"
    last = {name: out.rfind(text, since) for name, text in marks.items()}
    name, where = max(last.items(), key=lambda item: item[1])
    return name if where >= 0 else "idle"


REPLY_MARKS = {"streaming": GENERATING, "reply-saved": REPLY_DONE}
COUNT_MARKS = {"counting": COUNTING, "counted": COUNTED}


def _drive(moment: str, terminal: Terminal, rng: random.Random) -> str:
    """Bring the app to `moment` and press Ctrl+Q; returns what the screen
    showed then."""
    if not terminal.wait_for(FIRST_FRAME):
        return "never drawn"
    if moment == "loading":
        time.sleep(rng.uniform(0.0, 0.6))  # the demo model loads in ~0.5 s
        return _quit(terminal, _screen_state(terminal, 0, REPLY_MARKS))
    if moment.startswith("counting"):
        if not terminal.wait_for(COUNTING):
            return "never counted"
        since = terminal.mark()
        if moment == "counting-enter":
            terminal.type(b"Hi", rng)
            terminal.send(ENTER)
        time.sleep(rng.uniform(0.0, 1.0))
        state = _screen_state(terminal, since, COUNT_MARKS)
        if state == "idle":  # nothing new drawn in the meter since the count began
            state = "counting"
        return _quit(terminal, state + ("-after-enter" if moment == "counting-enter" else ""))
    if not terminal.wait_for(MODEL_READY):
        return "never ready"
    since = terminal.mark()
    if moment in ("settings", "browser"):
        if moment == "browser":
            time.sleep(0.3)  # the database opens just after the model is shown
        terminal.send(F2 if moment == "settings" else CTRL_O)
        shown = terminal.wait_for(
            SETTINGS_OPEN if moment == "settings" else BROWSER_OPEN, 10, since
        )
        time.sleep(rng.uniform(0.0, 0.5))
        return _quit(terminal, f"{moment}-open" if shown else f"{moment}-not-open")
    if moment == "typing":
        terminal.type(MESSAGE[: rng.randrange(1, len(MESSAGE))], rng)
        pause = rng.uniform(0.0, 1.2)
        time.sleep(pause)
        return _quit(terminal, "prefill" if pause > PREFILL_PAUSE_S else "typing")
    terminal.send(MESSAGE)  # as a terminal without bracketed paste sends a paste
    time.sleep(0.05)
    terminal.send(ENTER)
    if moment == "enter":
        time.sleep(rng.uniform(0.0, 0.2))
        return _quit(terminal, _screen_state(terminal, since, REPLY_MARKS) + "-after-enter")
    terminal.wait_for(GENERATING, since=since)
    time.sleep(rng.uniform(0.0, 1.8))  # a reply of 40 tokens takes ~1 s: some quits hit its end
    return _quit(terminal, _screen_state(terminal, since, REPLY_MARKS))


def _quit(terminal: Terminal, state: str) -> str:
    terminal.send(CTRL_Q)
    return state


def run_once(
    moment: str,
    model: Path,
    home: Path,
    rng: random.Random,
    big_data: Path | None = None,
    threads: int | None = None,
) -> QuitRun:
    """Start `chat` in `home`, quit at `moment`, and say how it ended. The
    counting moments open the big conversation copied from `big_data`."""
    extra: list[str] = []
    if moment.startswith("counting"):
        assert big_data is not None
        shutil.copytree(big_data, home / "data")
        extra = ["--continue"]
    env = folders_env(home, threads)
    terminal = Terminal(chat_command(model, *extra), env, (130, 30))
    try:
        hit = _drive(moment, terminal, rng)
        sent = time.monotonic()
        code = terminal.wait_exit(QUIT_TIMEOUT_S)
        quit_s = time.monotonic() - sent
    finally:
        terminal.close()
    output = terminal.output.decode("utf-8", "replace")
    return QuitRun(moment, hit, code, quit_s, output)


def run_many(
    runs: int,
    parallel: int,
    seed: int,
    threads: int | None = None,
    on_run: Callable[[QuitRun], None] = lambda run: None,
) -> list[QuitRun]:
    """`runs` quits spread evenly over the moments, `parallel` at a time."""
    model = demo_model_path()
    assert model is not None, "the demo model is not installed"
    rng = random.Random(seed)
    plan = [MOMENTS[i % len(MOMENTS)] for i in range(runs)]
    rng.shuffle(plan)
    seeds = [rng.randrange(2**32) for _ in plan]
    with tempfile.TemporaryDirectory(prefix="kvchat-quit-") as folder:
        root = Path(folder)
        big_data = make_big_conversation(root / "big", model, BIG_CONVERSATION_MESSAGES)

        def one(index: int) -> QuitRun:
            home = root / f"run-{index}"
            rng = random.Random(seeds[index])
            run = run_once(plan[index], model, home, rng, big_data, threads)
            shutil.rmtree(home, ignore_errors=True)
            on_run(run)
            return run

        with ThreadPoolExecutor(parallel) as pool:
            return list(pool.map(one, range(runs)))


def spread(runs: list[QuitRun]) -> str:
    """The moments hit (aimed at: what the screen showed), how often, and how
    long quitting took."""
    hits = collections.Counter(f"{run.moment}: {run.hit}" for run in runs)
    lines = [f"{count:4}  {name}" for name, count in sorted(hits.items())]
    times = sorted(run.quit_s for run in runs)
    median = times[len(times) // 2]
    lines.append(f"Ctrl+Q to exit: {times[0]:.2f}-{times[-1]:.2f} s, median {median:.2f} s")
    failed = sum(1 for run in runs if run.problem)
    lines.append(f"{len(runs)} runs, {failed} failed")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=int, nargs="?", default=100)
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--seed", type=int, default=random.randrange(2**32))
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: kvchat's)")
    args = parser.parse_args()
    print(f"seed {args.seed}", flush=True)
    started = time.monotonic()

    def report(run: QuitRun) -> None:
        problem = run.problem
        print(f"{run.moment:15} {run.hit:28} {run.quit_s:5.2f} s  {problem or 'ok'}", flush=True)
        if problem:
            print(run.output[-3000:], flush=True)

    done = run_many(args.runs, args.parallel, args.seed, args.threads, report)
    print(spread(done))
    print(f"{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
