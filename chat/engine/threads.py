"""How many CPU threads llama.cpp uses: one count for decoding (a forward pass
per token) and one for prompt batches.

What is fastest depends on the machine and the model, and the two counts
differ: a batch of prompt tokens is arithmetic that every core speeds up,
while decoding one token is mostly waiting for memory, and past a point more
threads only wait for each other. So kvchat measures, once per machine and
model, each candidate count on a few tokens right after the model loads
(a fraction of a second for small models, a few seconds for large ones on a
CPU), and remembers the rates in the cache folder. `model.n_threads` and
`model.n_threads_batch` override the choice.

In the app, decoding uses the fastest count while the machine is free, and
the fastest that leaves a core to other work while it is not
(chat.engine.decode_threads). llama.cpp's CPU backend runs each token on a
team of threads that meet at a barrier after every operation (hundreds per
token); a team as large as the machine stalls whenever anything else needs a
core. The app's own UI is light, and on a 2-core machine the app streams
about 1.5x faster with both threads than with one (docs/performance.md,
"Decode threads"), but another busy program makes the full team collapse
(a third of one thread's rate): the app then decodes with a thread fewer
until the full team is faster again. `chat -p` has no UI and uses the
fastest count. Prompt batches use the fastest count too (normally every
core: the UI is idle meanwhile), and a thread fewer while the machine is
busy (a batch stalls as well, if less).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chat.whole_files import replace_whole


def usable_cores() -> int:
    """CPUs this process may run on (a container's or `taskset`'s limit included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def candidates(cores: int) -> list[int]:
    """The thread counts worth measuring on `cores` CPUs: every count up to 4,
    then quarters of the machine (a count between two of them is rarely
    faster than both)."""
    if cores <= 4:
        return list(range(1, cores + 1))
    picks = {1, cores // 4, cores // 2, (3 * cores) // 4, cores - 1, cores}
    return sorted(n for n in picks if n >= 1)


@dataclass(frozen=True)
class ThreadCounts:
    decode: int
    batch: int
    how: str = "measured"
    """"measured" now, "remembered" from an earlier measure, "set" by the
    settings, or "default" (llama-cpp-python's, when measuring failed)."""
    busy: int | None = None
    """The decode count while the machine is busy (`decode` uses every core
    and something else needs one: chat.engine.decode_threads); None: always
    `decode`."""
    busy_batch: int | None = None
    """The prompt batches' count meanwhile (a batch of a few hundred tokens
    took 1.5x as long with every core as with a thread fewer while another
    program ran); None: always `batch`."""

    def batch_while(self, decode: int) -> int:
        """The prompt batches' count while decoding with `decode` threads."""
        if decode == self.busy and self.busy_batch is not None:
            return self.busy_batch
        return self.batch

    def decode_text(self) -> str:
        """The decode count as the status bar says it: "2 decode (1 when busy)"."""
        busy = f" ({self.busy} when busy)" if self.busy is not None else ""
        return f"{self.decode} decode{busy}"


@dataclass(frozen=True)
class Measured:
    """Rates (tokens per second) by thread count, from `calibrate`."""

    decode: dict[int, float]
    batch: dict[int, float]

    def best(self, spare_core: bool) -> ThreadCounts:
        """The fastest counts; with `spare_core` (the app), where the fastest
        decode count uses every core, the fastest that leaves one free is the
        count for a busy machine."""
        fastest = _fastest(self.decode)
        batch = _fastest(self.batch)
        most = max(self.decode)
        spared = {n: rate for n, rate in self.decode.items() if n < most}
        if not spare_core or not spared or fastest < most:
            return ThreadCounts(fastest, batch)
        spared_batch = {n: rate for n, rate in self.batch.items() if n < most}
        busy_batch = _fastest(spared_batch) if spared_batch and batch >= most else None
        return ThreadCounts(fastest, batch, busy=_fastest(spared), busy_batch=busy_batch)


def _fastest(rates: dict[int, float], close: float = 0.05) -> int:
    """The count with the best rate; of counts within `close` of it, the
    fewest (they leave cores to the UI and to other programs, and a thread
    fewer is less exposed to a busy core)."""
    top = max(rates.values())
    return min(n for n, rate in rates.items() if rate >= top * (1 - close))


def calibrate(
    decode_rate: Callable[[int], float], batch_rate: Callable[[int], float], counts: Sequence[int]
) -> Measured:
    """Each count's decode and batch rate, the counts taking turns twice (the
    machine's speed drifts; the better of a count's two tries is kept)."""
    decode: dict[int, float] = {}
    batch: dict[int, float] = {}
    for _ in range(2):
        for n in counts:
            decode[n] = max(decode.get(n, 0.0), decode_rate(n))
            batch[n] = max(batch.get(n, 0.0), batch_rate(n))
    return Measured(decode, batch)


CALIBRATION_DECODE_TOKENS = 24
CALIBRATION_BATCH = 32
CALIBRATION_BUDGET_S = 0.06
"""Per thread count and try: about this long decoding, and again evaluating
batches (a large model on a CPU stops after a token or a batch)."""

CALIBRATION_FILLER = b" the quick brown fox jumps over the lazy dog" * 40
"""The text whose tokens are evaluated to measure the rates."""


def measure(
    counts: Sequence[int],
    filler: Sequence[int],
    set_threads: Callable[[int], None],
    reset: Callable[[], None],
    evaluate: Callable[[Sequence[int]], None],
) -> Measured:
    """Decode and batch rates at each thread count, evaluating the tokens of
    `filler` with a model: `set_threads(n)` makes it use n threads for both,
    `reset()` empties its KV cache, `evaluate(tokens)` evaluates a batch."""

    def rate(n: int, size: int, end: int) -> float:
        """Tokens a second with `n` threads, evaluating `filler` in pieces of
        `size` from its second token (no piece starting past `end - size`),
        for about the calibration budget."""
        set_threads(n)
        reset()
        evaluate(filler[:1])  # the first call after a change of threads pays for it
        started, done = time.perf_counter(), 0
        for at in range(1, end - size + 1, size):
            evaluate(filler[at : at + size])
            done += size
            if time.perf_counter() - started > CALIBRATION_BUDGET_S:
                break
        return done / (time.perf_counter() - started)

    def decode_rate(n: int) -> float:
        return rate(n, 1, CALIBRATION_DECODE_TOKENS)

    def batch_rate(n: int) -> float:
        return rate(n, CALIBRATION_BATCH, len(filler) - 1)

    return calibrate(decode_rate, batch_rate, counts)


def machine_key() -> str:
    """What a measure is valid for on this side: the CPU model and how many
    of its cores this process may use."""
    model = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model} x{usable_cores()}"


QUIET = "quiet"
"""The mark of rates measured while no other program ran (`choose_threads`
remembers no others)."""


class RememberedRates:
    """Measured rates by machine and model, in one small JSON file. A file
    that cannot be read or written only means measuring again, and so does
    an entry not marked as measured on a quiet machine (`QUIET`): one
    written before kvchat looked may have been measured while another
    program held a core, which makes fewer threads look faster for good."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> Measured | None:
        entry = self._read().get(key)
        if not isinstance(entry, dict) or entry.get(QUIET) is not True:
            return None
        try:
            decode = {int(n): float(r) for n, r in entry["decode"].items()}
            batch = {int(n): float(r) for n, r in entry["batch"].items()}
        except (TypeError, KeyError, ValueError, AttributeError, OverflowError):
            return None  # Overflow: a rate of 400 digits
        cores = usable_cores()
        for rates in (decode, batch):
            # A file edited or damaged by hand: measuring again is the answer,
            # not a rate that picks no count or a count the machine lacks.
            if not rates or min(rates) < 1 or max(rates) > cores:
                return None
            if not all(math.isfinite(rate) and rate > 0 for rate in rates.values()):
                return None
        return Measured(decode, batch)

    def put(self, key: str, measured: Measured) -> None:
        data = self._read()
        data[key] = {
            "decode": measured.decode,
            "batch": measured.batch,
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            QUIET: True,
        }
        with contextlib.suppress(OSError):  # a measure not kept is taken again
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_whole(self.path, json.dumps(data, indent=1, sort_keys=True), durable=False)


def choose_threads(
    decode: int | None,
    batch: int | None,
    measure: Callable[[Sequence[int]], Measured],
    remembered: RememberedRates,
    model_key: str,
    spare_core: bool = True,
    others_running: Callable[[], bool] = lambda: False,
) -> ThreadCounts:
    """The counts to use: `decode` and `batch` where the settings give them,
    else the fastest measured for this machine and model before, else
    measured now, and remembered unless `others_running()` says another
    program ran both as the measure began and as it ended. A program that
    holds a core stalls the team that needs it (a third of one thread's rate
    with both of a 2-core machine's), so fewer threads measure faster;
    remembered, that choice halved the app's prompt rate for good (found on
    this project's machine: measured during a test run, 85 tok/s where two
    threads give 177). Measured while busy, the counts serve this run and
    the next load measures again; a program seen at one look only (a
    moment's work) costs the measure little and a measure at every load
    more. See `Measured.best` for `spare_core`."""
    if decode is not None and batch is not None:
        return ThreadCounts(decode, batch, "set")
    key = f"{machine_key()} | {model_key}"
    how = "remembered"
    measured = remembered.get(key)
    if measured is None:
        how = "measured"
        busy = others_running()
        try:
            measured = measure(candidates(usable_cores()))
        except Exception:  # llama.cpp failed on the filler tokens: its own defaults
            cores = usable_cores()
            best = ThreadCounts(max(1, cores // 2), cores, "default")
            return ThreadCounts(decode or best.decode, batch or best.batch, best.how)
        if not (busy and others_running()):
            remembered.put(key, measured)
    best = measured.best(spare_core)
    if decode is not None or batch is not None:
        how = "set"
    if decode is not None:  # the user's count, busy or not
        return ThreadCounts(decode, batch or best.batch, how)
    if batch is not None:  # the user's count for prompts, busy or not
        return ThreadCounts(best.decode, batch, how, best.busy)
    return ThreadCounts(best.decode, best.batch, how, best.busy, best.busy_batch)
