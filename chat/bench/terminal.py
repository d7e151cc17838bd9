"""The real app in a pseudo-terminal, as a user runs it: how fast a reply
streams, and what the UI costs while it does.

`chat --model MODEL` starts in a 120x40 pseudo-terminal (as the startup row
does), the story prompt is typed and sent, and this process reads everything
the app draws until the reply has ended. The decode rate is the app's own
figure for the reply (what its status bar shows, saved with the message);
the CPU each of the app's threads used while the reply streamed is read from
/proc: the UI thread (the main one) and every thread that is neither
llama.cpp's nor kvchat's own (Textual's output and input threads) are the
UI's cost. kvchat names its threads for the kernel (`kvchat-...`,
chat.runtime.background); before it did, the prompt evaluated again after
the reply (`kvchat-rebatch`) was counted as the UI's: 6-33 ms a reply.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chat.bench.app_terminal import Terminal
from chat.bench.startup import MODEL_READY_MARK
from chat.bench.workload import SAMPLING, STORY
from chat.engine.threads import ThreadCounts
from chat.paths import DATA_DIR_ENV
from chat.runtime.background import PREFIX as KVCHAT_THREAD_PREFIX

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LONG_PROMPT = "Summarise these notes in one line: " + " ".join(
    f"Note {n}: the lighthouse keeper logged the tide, the wind and a passing ship."
    for n in range(1, 31)
)
"""About 550 tokens, pasted at once."""


@dataclass
class TerminalReply:
    decode_tps: float
    """The app's own rate for the reply (tokens after the first / their time)."""
    tokens: int
    ui_cpu_s: float
    """CPU seconds of the UI thread and Textual's threads while the reply streamed."""
    engine_cpu_s: float
    """CPU seconds of the threads that ran llama.cpp meanwhile."""
    wall_s: float
    prompt_tps: float
    """The first reply's prompt: tokens evaluated / time to its first token."""
    frames: int = 0
    """Frames the app drew from sending the message to the reply's end."""
    decode_thread: ThreadTimes | None = None
    """How the thread that ran the reply spent it (None where /proc has no schedstat)."""
    text: str = ""
    """The reply as saved."""
    prompt_tokens: int = 0
    """The measured reply's prompt, in tokens (what the KV cache held included)."""
    written: int = 0
    """Bytes the app wrote to the terminal from sending to the reply's end."""
    kvchat_threads_cpu_s: float = 0.0
    """CPU seconds of kvchat's own threads still running at the reply's end
    (the token probabilities, the prompt evaluated again, a state saved):
    neither the UI's nor the reply's."""

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.wall_s if self.wall_s else 0.0

    @property
    def ui_cpu_per_100_tokens(self) -> float:
        return self.ui_cpu_s / self.tokens * 100

    @property
    def kib_written_per_100_tokens(self) -> float:
        return self.written / 1024 / self.tokens * 100


@dataclass(frozen=True)
class ThreadTimes:
    """A thread's time while the reply streamed, from the kernel's schedstat:
    on a core, runnable but waiting for one, and the rest blocked (asleep:
    where a thread that waits for Python's GIL, or for a lock, is)."""

    wall_s: float
    on_cpu_s: float
    waiting_for_core_s: float

    @property
    def blocked_s(self) -> float:
        return max(0.0, self.wall_s - self.on_cpu_s - self.waiting_for_core_s)


class ThreadWatch:
    """Each thread's schedstat, read whenever `read` is called (while the reply
    streams): the thread that ran the reply has ended by the time it is over,
    so its last reading is kept."""

    READ_EVERY_S = 0.1

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._first: dict[int, tuple[float, float, float]] = {}
        self._last: dict[int, tuple[float, float, float]] = {}
        self._read_at = 0.0

    def read(self) -> None:
        """Read, at most every READ_EVERY_S: the reading takes CPU from the
        machine the app runs on."""
        now = time.monotonic()
        if now - self._read_at < self.READ_EVERY_S:
            return
        self._read_at = now
        try:
            tids = os.listdir(f"/proc/{self._pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                on_cpu, waiting = schedstat(f"/proc/{self._pid}/task/{tid}")
            except (OSError, ValueError):  # ended, or no schedstat in this kernel
                continue
            reading = (now, on_cpu, waiting)
            self._first.setdefault(int(tid), reading)
            self._last[int(tid)] = reading

    def busiest(self, besides: int) -> ThreadTimes | None:
        """The thread other than `besides` that was on a core longest: the one
        that ran the reply (llama.cpp's compute runs on it at one thread)."""
        spans = []
        for tid, last in self._last.items():
            if tid != besides:
                (wall_at, on_cpu, waiting), first = last, self._first[tid]
                spans.append(ThreadTimes(wall_at - first[0], on_cpu - first[1], waiting - first[2]))
        return max(spans, key=lambda times: times.on_cpu_s, default=None)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds used so far by each thread of `pid`: to the nanosecond from
    the kernel's schedstat where it keeps one (a UI's few tenths of a second
    over a reply would be counted in 10 ms clock ticks otherwise)."""
    times: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            times[int(tid)] = _thread_cpu(f"/proc/{pid}/task/{tid}")
        except (OSError, ValueError):  # the thread ended
            continue
    return times


def _thread_cpu(task: str) -> float:
    try:
        return schedstat(task)[0]
    except (OSError, ValueError):  # no schedstat in this kernel
        return cpu_seconds(f"{task}/stat")


def schedstat(task: str) -> tuple[float, float]:
    """A thread's seconds on a core and waiting for one, from the kernel's
    schedstat (`task`: /proc/PID/task/TID); ValueError if it is malformed."""
    with open(f"{task}/schedstat") as stat:
        on_cpu, waiting, _ = (int(field) for field in stat.read().split())
    return on_cpu / 1e9, waiting / 1e9


def thread_names(pid: int) -> dict[int, bytes]:
    """Each thread's name as the kernel knows it (what the thread set, else its process's)."""
    names: dict[int, bytes] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", "rb") as comm:
                names[int(tid)] = comm.read().strip()
        except OSError:  # the thread ended
            continue
    return names


def process_cpu(pid: int) -> float:
    """CPU seconds used so far by the whole process, ended threads included."""
    return cpu_seconds(f"/proc/{pid}/stat")


def cpu_seconds(stat_path: str) -> float:
    """User plus system time from a /proc stat file (fields 14 and 15)."""
    with open(stat_path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def stream_in_terminal(
    model: Path,
    env: dict[str, str],
    tokens: int,
    threads: ThreadCounts | None = None,
    earlier_turns: int = 0,
    timeout: float = 300,
    first_prompt: str = LONG_PROMPT,
    prompt: str = STORY,
    resume: int | None = None,
) -> TerminalReply:
    """One reply of `tokens` tokens in the real app; see the module docstring.
    `first_prompt`: the pasted prompt whose rate is measured (a short one
    where prompts are slow, as on a software GPU). `prompt`: the message whose
    reply is measured. `resume`: a saved conversation's id: the app opens it,
    and both replies go on it (else the measured reply starts a new one)."""
    env = dict(env)
    env["KVCHAT_SAMPLING_MAX_TOKENS"] = str(tokens)
    env["KVCHAT_SEED"] = str(SAMPLING.seed)
    env["KVCHAT_TEMPERATURE"] = str(SAMPLING.temperature)
    env["KVCHAT_CHAT_PREFILL"] = "false"
    if threads is not None:  # else the app chooses, as for a user
        env["KVCHAT_MODEL_N_THREADS"] = str(threads.decode)
        env["KVCHAT_MODEL_N_THREADS_BATCH"] = str(threads.batch)
    database = Path(env[DATA_DIR_ENV]) / "conversations.db"
    terminal = Terminal.chat(model, env, () if resume is None else ("--resume", str(resume)))
    pid = terminal.pid
    try:
        terminal.wait_for(MODEL_READY_MARK, timeout)
        reply: SavedReply | None = None
        earlier = saved_replies(database)  # from an earlier run with the same folders

        written_to = DatabaseWatch(database)

        def ended(replies: int) -> Callable[[], bool]:
            def check() -> bool:
                nonlocal reply
                if not written_to.changed():
                    return False
                reply = finished_reply(database, earlier + replies)
                return reply is not None

            return check

        # A first reply to a long pasted prompt: its prompt rate is measured,
        # and it warms up what the app does once (the Markdown parser is
        # imported for the first reply). The second reply's decode is measured.
        terminal.send(b"\x1b[200~" + first_prompt.encode() + b"\x1b[201~")
        time.sleep(0.5)
        terminal.send(b"\r")
        terminal.wait_until(ended(1), timeout)
        first = reply
        for turn in range(earlier_turns):  # a longer conversation on screen
            time.sleep(0.3)
            terminal.send(STORY.encode() + b"\r")
            terminal.wait_until(ended(2 + turn), timeout)
        if not earlier_turns and resume is None:  # the raw loop's depth in the KV cache
            terminal.send(b"\x0e")  # Ctrl+N: a new conversation
        time.sleep(0.5)
        terminal.send(prompt.encode() + b"\r")
        before, before_total = thread_cpu(pid), process_cpu(pid)
        started, drawn = time.monotonic(), len(terminal.screen)
        watch = ThreadWatch(pid)
        reply_ended = ended(2 + earlier_turns)

        def watched() -> bool:
            watch.read()
            return reply_ended()

        terminal.wait_until(watched, timeout)
        wall = time.monotonic() - started
        frames = terminal.frames_since(drawn)
        written = len(terminal.screen) - drawn
        after, total = thread_cpu(pid), process_cpu(pid) - before_total
        names = thread_names(pid)
    finally:
        terminal.close()
    assert reply is not None
    used = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    # llama.cpp's worker threads work (or spin) for most of the reply; the UI's
    # do not. The thread that ran the reply has ended: its CPU is in the
    # process's total, not in any thread still there. kvchat's own threads
    # (named for the kernel: the token probabilities summarised, the prompt
    # evaluated again after the reply, a state saved) are not the UI's either.
    own = {tid for tid, name in names.items() if name.startswith(KVCHAT_THREAD_PREFIX.encode())}
    ui_cpu = sum(
        cpu for tid, cpu in used.items() if tid == pid or (cpu < 0.3 * wall and tid not in own)
    )
    kvchat_threads_cpu = sum(cpu for tid, cpu in used.items() if tid in own)
    engine_cpu = total - ui_cpu
    assert first is not None
    decode_thread = watch.busiest(besides=pid)
    return TerminalReply(
        reply.decode_tps,
        reply.tokens,
        ui_cpu,
        engine_cpu,
        wall,
        first.prompt_tps,
        frames,
        decode_thread,
        reply.text,
        reply.prompt_tokens,
        written,
        kvchat_threads_cpu,
    )


class DatabaseWatch:
    """Whether the app wrote to its database since the last look: a stat of
    its files (the database and its write-ahead log), a few microseconds,
    where opening the database and reading its replies takes about 0.3 ms.
    The reader looks after every read of the terminal, dozens of times a
    second, on the machine whose cores the measured reply needs. A file's
    time moves in the kernel's ticks, so a write in the same tick as the
    last look, leaving the size as it was, would go unseen: the answer is
    yes at least every LOOK_ANYWAY_S."""

    LOOK_ANYWAY_S = 0.5

    def __init__(self, database: Path) -> None:
        self._files = (database, database.with_name(database.name + "-wal"))
        self._seen: tuple[tuple[int, int], ...] | None = None
        self._looked_at = 0.0

    def changed(self) -> bool:
        seen = tuple(_signature(path) for path in self._files)
        now = time.monotonic()
        if seen == self._seen and now - self._looked_at < self.LOOK_ANYWAY_S:
            return False
        self._seen, self._looked_at = seen, now
        return True


def _signature(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (-1, -1)
    return (stat.st_mtime_ns, stat.st_size)


def saved_replies(database: Path) -> int:
    if not database.exists():
        return 0
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as conn:
        query = "SELECT count(*) FROM messages WHERE role = 'assistant' AND decode_tps IS NOT NULL"
        return int(conn.execute(query).fetchone()[0])


@dataclass
class SavedReply:
    tokens: int
    decode_tps: float
    prompt_tps: float
    prompt_tokens: int
    text: str


def finished_reply(database: Path, replies: int) -> SavedReply | None:
    """Saved reply number `replies` (counting the replies the app streamed),
    once that many have ended."""
    if not database.exists():
        return None
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=0.1) as conn:
            rows = conn.execute(
                "SELECT generated_tokens, decode_tps, prompt_evaluated, ttft_s, content, "
                "prompt_tokens FROM messages "
                "WHERE role = 'assistant' AND decode_tps IS NOT NULL ORDER BY id"
            ).fetchall()
    except sqlite3.Error:
        return None
    if len(rows) < replies:
        return None
    tokens, decode_tps, evaluated, ttft, text, size = rows[replies - 1]
    prompt_tps = evaluated / ttft if ttft else 0.0
    return SavedReply(int(tokens), float(decode_tps), prompt_tps, int(size or 0), str(text))
