"""Instant resume: time to first token after reopening a conversation in a
new process with its saved KV cache state, next to the same turn with the
cache warm and evaluated from scratch; a branch switch with the branch's state
restored; the time and disk a state costs per 1,000 tokens of context.

The conversation is built in this process and its state saved to a cache
folder; a child process (`python -m chat.bench.resume`, as a user reopening
it after a restart) loads the model, restores the state and sends the next
message. Targets (issue 16): restored <= 1.2x warm, branch switch <= 1.2x warm.
The restore is timed in parts (finding the file, reading it, its checksum,
loading it into llama.cpp) to show what limits it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from chat.bench.rows import Options, Row
from chat.bench.ttft import first_token_s
from chat.bench.workload import SAMPLING, finished, first_token_reply, quiet_load
from chat.engine.kv_state import KvState
from chat.engine.llama import LlamaEngine
from chat.engine.state_cache import StateCache
from chat.session.resume import Resumer
from chat.settings.schema import ModelSettings

ROUNDS = 5
CONVERSATION = "bench#1"
NEXT_MESSAGE = "Thank you. Now sum the story up in three sentences."
TARGET = 1.2


@dataclass
class Built:
    """A conversation of `turns` turns and a branch of it at `branch_turn`."""

    messages: list[dict[str, str]]
    """The conversation, ending with the reply of its last turn."""
    state: KvState
    """The KV cache right after that reply."""
    branch: list[dict[str, str]]
    branch_state: KvState
    branch_turn: int


def user_message(turn: int) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Turn {turn}. Tell me one more detail about the lighthouse, "
        "its keeper and the storms they lived through.",
    }


def build(engine: LlamaEngine, turns: int, reply_tokens: int) -> Built:
    """The conversation, turn by turn as a user has it; at `branch_turn` the
    user's message is also edited and answered (another branch)."""
    sampling = replace(SAMPLING, max_tokens=reply_tokens)
    branch_turn = min(10, max(1, turns - 1))
    engine.reset()
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are a helpful assistant."}]
    branch: list[dict[str, str]] = []
    branch_state: KvState | None = None
    for turn in range(1, turns + 1):
        if turn == branch_turn:
            edited = {"role": "user", "content": f"Turn {turn}. Tell me about the keeper's dog."}
            branch = [*messages, edited]
            reply = finished(engine.stream_reply(branch, sampling, threading.Event()))
            engine.rebatch_reply()  # as the app does while the user reads a seeded reply
            branch.append({"role": "assistant", "content": reply.text})
            branch_state = engine.save_state()
        messages.append(user_message(turn))
        reply = finished(engine.stream_reply(messages, sampling, threading.Event()))
        engine.rebatch_reply()
        messages.append({"role": "assistant", "content": reply.text})
    state = engine.save_state()
    assert state is not None and branch_state is not None
    return Built(messages, state, branch, branch_state, branch_turn)


def warm_first_token_s(
    engine: LlamaEngine, state: KvState, messages: list[dict[str, str]]
) -> float:
    """TTFT of `messages` with the KV cache holding `state`, as right after the
    previous reply (the state put back in memory, untimed, between rounds)."""
    engine.restore_state(state)
    return first_token_s(engine, messages)


@dataclass
class SameSeed:
    """A seeded reply to the same turn, with the KV cache warm and from scratch."""

    alike: int
    """Leading tokens the two replies share."""
    tokens: int
    """Tokens of the warm reply."""
    rebatch_s: float
    """The background pass after the warm reply (`rebatch_reply`)."""


def same_seed(
    engine: LlamaEngine, state: KvState, turn: list[dict[str, str]], tokens: int
) -> SameSeed:
    sampling = replace(SAMPLING, max_tokens=tokens)
    engine.restore_state(state)
    warm = finished(engine.stream_reply(turn, sampling, threading.Event()))
    started = time.perf_counter()
    engine.rebatch_reply()
    rebatch_s = time.perf_counter() - started
    engine.reset()
    cold = finished(engine.stream_reply(turn, sampling, threading.Event()))
    ids, cold_ids = warm.token_ids or (), cold.token_ids or ()
    alike = 0
    while alike < min(len(ids), len(cold_ids)) and ids[alike] == cold_ids[alike]:
        alike += 1
    return SameSeed(alike, len(ids), rebatch_s)


def resume_rows(engine: LlamaEngine, options: Options) -> list[Row]:
    rounds = 1 if options.quick else ROUNDS
    reply_tokens = 8 if options.quick else 110
    built = build(engine, options.turns, reply_tokens)
    turn = [*built.messages, {"role": "user", "content": NEXT_MESSAGE}]
    branch_turn = [*built.branch, {"role": "user", "content": NEXT_MESSAGE}]
    identity = engine.state_identity()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kvchat-bench-states-") as folder:
        cache = StateCache(Path(folder), 1 << 40)

        # Saving: copying the state out of llama.cpp, then writing the file.
        engine.restore_state(built.state)
        grab_s, write_s = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            state = engine.save_state()
            grabbed = time.perf_counter()
            assert state is not None
            for path in Path(folder).iterdir():
                path.unlink()  # a new file each round, as a first save
            cache.put(state, identity, CONVERSATION)
            grab_s.append(grabbed - started)
            write_s.append(time.perf_counter() - grabbed)
        cache.put(built.branch_state, identity, CONVERSATION)
        n_tokens = len(built.state.tokens)
        per_k = 1000 / n_tokens
        disk = max(path.stat().st_size for path in Path(folder).iterdir())
        grab, write = statistics.median(grab_s), statistics.median(write_s)

        # Reopened in a new process, against the same turn with the cache warm
        # here: one round of each in turn, so that both see the same machine.
        warm_s: list[float] = []
        parts: dict[str, list[float]] = {}
        with ReopenedProcess(options.model, Path(folder), turn) as reopened:
            for _ in range(rounds):
                warm_s.append(warm_first_token_s(engine, built.state, turn))
                for name, value in reopened.round().items():
                    parts.setdefault(name, []).append(value)
        child = {name: statistics.median(values) for name, values in parts.items()}
        warm = statistics.median(warm_s)
        restored = child["total_s"]
        engine.reset()
        cold = first_token_s(engine, turn)
        seeded = same_seed(engine, built.state, turn, reply_tokens)

        # Branch switch: the cache holds the main branch; the branch's state is
        # restored, against the branch warm and a switch without saved states.
        resumer = Resumer(cache)
        switch_s, no_state_s, branch_warm_s = [], [], []
        switch_restored = 0
        prompt = engine.tokenize_chat(branch_turn)
        for _ in range(rounds):
            engine.restore_state(built.state)
            started = time.perf_counter()
            switch_restored = resumer.restore_for(engine, prompt)
            restore = time.perf_counter() - started
            switch_s.append(restore + first_token_s(engine, branch_turn))
            branch_warm_s.append(warm_first_token_s(engine, built.branch_state, branch_turn))
            engine.restore_state(built.state)
            no_state_s.append(first_token_s(engine, branch_turn))
        switch = statistics.median(switch_s)
        branch_warm = statistics.median(branch_warm_s)
        no_state = statistics.median(no_state_s)

    ratio = restored / warm
    switch_ratio = switch / branch_warm
    prompt_tokens = child["prompt_tokens"]
    rows.append(
        Row(
            f"reopen a {options.turns}-turn conversation in a new process: TTFT, state restored",
            restored * 1000,
            "ms",
            note=f"restore {child['restore_s'] * 1000:,.1f} ms + first token "
            f"{child['ttft_s'] * 1000:,.0f} ms ({child['evaluated']:.0f} of "
            f"{prompt_tokens:,.0f} tokens evaluated)",
        )
    )
    rows.append(
        Row(
            "  restoring it, in parts",
            child["restore_s"] * 1000,
            "ms",
            note=f"{child['state_mb']:,.0f} MB: find, map and checksum "
            f"{child['find_read_check_s'] * 1000:,.1f} ms (the checksum alone "
            f"{child['checksum_s'] * 1000:,.1f}), load into llama.cpp "
            f"{child['load_s'] * 1000:,.1f} ms; copying the file into memory alone would "
            f"take {child['read_s'] * 1000:,.1f} ms",
        )
    )
    rows.append(
        Row(
            "  state restored as the conversation opens, then send: TTFT",
            child["ttft_s"] * 1000,
            "ms",
            note=f"{child['ttft_s'] / warm:.2f}x warm: the restore is over before the "
            "message is sent when the app restores on opening",
        )
    )
    rows.append(Row("  the same turn, KV cache warm", warm * 1000, "ms"))
    rows.append(
        Row(
            "  the same turn, evaluated from scratch",
            cold * 1000,
            "ms",
            note=f"prompt {prompt_tokens:,} tokens",
        )
    )
    rows.append(
        Row(
            "  restored / warm",
            ratio,
            "x",
            f"<= {TARGET}x",
            ratio <= TARGET,
            f"from scratch / warm: {cold / warm:,.0f}x",
        )
    )
    rows.append(
        Row(
            "  the same seed's reply, warm and from scratch: tokens alike",
            seeded.alike,
            f"of {seeded.tokens}",
            "all",
            seeded.alike == seeded.tokens > 0,
            "a restored state is the warm cache, byte for byte",
        )
    )
    rows.append(
        Row(
            "  a seeded reply evaluated again in batches, after it (in the background)",
            seeded.rebatch_s / max(1, seeded.tokens) * 100_000,
            "ms per 100 tokens",
            note=f"{seeded.tokens} tokens in {seeded.rebatch_s * 1000:,.0f} ms; what makes the "
            "line above hold",
        )
    )
    rows.append(
        Row(
            f"branch switch at turn {built.branch_turn}, then send: TTFT, state restored",
            switch * 1000,
            "ms",
            note=f"{switch_restored:,} tokens restored; without a state "
            f"{no_state * 1000:,.0f} ms; the branch warm {branch_warm * 1000:,.0f} ms",
        )
    )
    rows.append(
        Row(
            "  branch switch / the branch warm",
            switch_ratio,
            "x",
            f"<= {TARGET}x",
            switch_ratio <= TARGET,
        )
    )
    rows.append(
        Row(
            "save a KV state: time per 1,000 tokens of context",
            (grab + write) * per_k * 1000,
            "ms",
            note=f"copy out of llama.cpp {grab * per_k * 1000:,.1f} ms (the only part "
            f"that holds the engine) + write {write * per_k * 1000:,.1f} ms; "
            f"{n_tokens:,} tokens",
        )
    )
    rows.append(Row("save a KV state: disk per 1,000 tokens of context", disk * per_k / 1e6, "MB"))
    return rows


class ReopenedProcess:
    """`python -m chat.bench.resume` in a new process: it loads the model, then
    measures one reopening each time it is asked (`round`)."""

    def __init__(self, model: Path, folder: Path, messages: list[dict[str, str]]) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
            json.dump(messages, file)
        self._messages_path = file.name
        self._errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in __exit__)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "chat.bench.resume", str(model), str(folder), file.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
        )
        self._answer()  # loaded

    def _answer(self) -> dict[str, float]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._errors.seek(0)
            raise RuntimeError(f"the reopened process ended early: {self._errors.read()[-2000:]}")
        answer: dict[str, float] = json.loads(line)
        return answer

    def round(self) -> dict[str, float]:
        assert self._process.stdin is not None
        self._process.stdin.write("round\n")
        self._process.stdin.flush()
        return self._answer()

    def __enter__(self) -> ReopenedProcess:
        return self

    def __exit__(self, *_: object) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.unlink(self._messages_path)
        self._errors.close()


class Reopening:
    """The new process's side: the model loaded, then one reopening per round."""

    def __init__(self, model: Path, folder: Path, messages: list[dict[str, str]]) -> None:
        log = Path(tempfile.gettempdir()) / "kvchat-bench-resume-llama.log"
        self.engine = quiet_load(model, ModelSettings(), log)
        self.folder = folder
        self.messages = messages
        self.prompt = self.engine.tokenize_chat(messages)

    def round(self) -> dict[str, float]:
        """Restore the saved state into an empty cache and send the message
        (`total_s`: what the user waits), then time the restore's parts."""
        engine, messages = self.engine, self.messages
        resumer = Resumer(StateCache(self.folder, 1 << 40))  # as a new process does
        engine.reset()
        engine.tokenize_prompt(messages[:-2])  # as first_token_s does, untimed
        started = time.perf_counter()
        restored = resumer.restore_for(engine, self.prompt)
        restore_s = time.perf_counter() - started
        if restored == 0:
            raise RuntimeError("no saved state was restored")
        reply = first_token_reply(engine, messages)
        measures = {
            "restore_s": restore_s,
            "ttft_s": reply.stats.ttft_s,
            "total_s": restore_s + reply.stats.ttft_s,
            "evaluated": reply.stats.prompt_evaluated,
            "prompt_tokens": len(self.prompt),
        }
        started = time.perf_counter()
        state = resumer.cache.find(engine.state_identity(), self.prompt)
        measures["find_read_check_s"] = time.perf_counter() - started
        assert state is not None
        measures["state_mb"] = len(state.data) / 1e6
        path = max(self.folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)
        started = time.perf_counter()
        data = bytearray(path.stat().st_size)
        with path.open("rb", buffering=0) as file:
            file.readinto(data)
        measures["read_s"] = time.perf_counter() - started
        started = time.perf_counter()
        zlib.crc32(data)
        measures["checksum_s"] = time.perf_counter() - started
        engine.reset()
        started = time.perf_counter()
        engine.restore_state(state)
        measures["load_s"] = time.perf_counter() - started
        return measures


def main() -> None:
    """The reopened process: argv is MODEL FOLDER MESSAGES_JSON; each line
    "round" on stdin is answered with one line of JSON on stdout."""
    model, folder, messages_file = (Path(arg) for arg in sys.argv[1:4])
    messages = json.loads(messages_file.read_text())
    out = sys.stdout
    with contextlib.redirect_stdout(io.StringIO()):
        reopening = Reopening(model, folder, messages)
        print(json.dumps({"loaded": 1.0}), file=out, flush=True)
        for line in sys.stdin:
            if line.strip() == "round":
                print(json.dumps(reopening.round()), file=out, flush=True)
    reopening.engine.close()


if __name__ == "__main__":
    main()
