"""Decode threads chosen between tokens: the full team while it is faster, a
thread fewer while the machine is busy (chat.engine.decode_threads)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from chat.bench.workload import busy_core
from chat.engine.decode_threads import (
    FIRST_TRY_AFTER,
    LONGEST_TRY_AFTER,
    WINDOW_TOKENS,
    DecodeThreads,
)
from chat.engine.llama import LlamaEngine
from chat.engine.machine_load import others_running
from chat.engine.protocol import Finished
from chat.engine.threads import ThreadCounts, usable_cores
from chat.settings.schema import SamplingSettings


class Machine:
    """A clock and a decode rate per thread count, as a busy or free machine
    would give them."""

    def __init__(self, rates: dict[int, float]) -> None:
        self.rates = rates
        self.now = 0.0
        self.used: list[int] = []
        self.others: int | None = None
        """Other programs' threads on the cores, as the kernel would say."""

    def start_reply(self, threads: DecodeThreads) -> None:
        """A reply asked for, its prompt made: the engine's calls."""
        threads.look()
        threads.before_batches()
        threads.reply_started()

    def decode(self, threads: DecodeThreads, tokens: int) -> None:
        for _ in range(tokens):
            self.used.append(threads.current)
            self.now += 1 / self.rates[threads.current]
            threads.token_decoded()


def governed(machine: Machine) -> DecodeThreads:
    set_to: list[int] = []
    threads = DecodeThreads(
        2, 1, set_to.append, clock=lambda: machine.now, others=lambda: machine.others
    )
    machine.start_reply(threads)
    return threads


def settled() -> tuple[Machine, DecodeThreads]:
    """A free machine whose chooser settled on the full team (100 tokens)."""
    machine = Machine({2: 80.0, 1: 50.0})
    threads = governed(machine)
    machine.decode(threads, 100)
    return machine, threads


def test_a_free_machine_decodes_with_the_full_team_after_one_window_of_reference() -> None:
    machine = Machine({2: 80.0, 1: 50.0})
    threads = governed(machine)
    machine.decode(threads, 500)
    assert threads.current == 2
    # One window at a thread fewer, to know what the full team must beat.
    assert machine.used.count(1) == WINDOW_TOKENS
    assert threads.switches == 2


def test_a_stalled_team_is_left_after_one_token_and_tried_again_less_and_less_often() -> None:
    machine, threads = settled()
    machine.rates[2] = 4.0  # another program takes a core: the team stalls
    before = len(machine.used)
    machine.decode(threads, 3000)
    stalled = [i for i, n in enumerate(machine.used[before:]) if n == 2]
    assert threads.current == 1
    # Each try of the full team is one stalled token, each longer after.
    assert len(stalled) <= 8
    gaps = [b - a for a, b in itertools.pairwise(stalled)]
    assert gaps == sorted(gaps)
    assert gaps[0] >= FIRST_TRY_AFTER and max(gaps) <= LONGEST_TRY_AFTER + 2 * WINDOW_TOKENS
    # What that costs: the stalled tokens' time against a thread fewer's.
    lost = len(stalled) * (1 / 4.0 - 1 / 50.0)
    assert lost / (3000 / 50.0) < 0.05


def test_the_full_team_comes_back_once_the_machine_is_free_again() -> None:
    machine = Machine({2: 80.0, 1: 50.0})
    threads = governed(machine)
    machine.decode(threads, 50)
    machine.rates[2] = 4.0
    machine.decode(threads, 400)
    assert threads.current == 1
    machine.rates[2] = 80.0
    machine.decode(threads, LONGEST_TRY_AFTER + 2 * WINDOW_TOKENS)
    assert threads.current == 2
    machine.decode(threads, 200)
    assert machine.used[-200:] == [2] * 200


def test_a_reply_after_a_pause_tries_the_full_team_at_once() -> None:
    machine = Machine({2: 80.0, 1: 50.0})
    threads = governed(machine)
    machine.decode(threads, 50)
    machine.rates[2] = 4.0
    machine.decode(threads, 400)  # tries lost: the next waits 256 tokens
    assert threads.current == 1
    machine.rates[2] = 80.0  # the busy program ended while the user read
    machine.now += 45.0
    machine.start_reply(threads)
    machine.decode(threads, 1 + 3 * WINDOW_TOKENS)
    assert threads.current == 2
    # Not after a short pause: the wait goes on.
    machine.rates[2] = 4.0
    machine.decode(threads, 40)
    assert threads.current == 1
    machine.rates[2] = 80.0
    machine.now += 5.0
    machine.start_reply(threads)
    machine.decode(threads, 1 + 3 * WINDOW_TOKENS)
    assert threads.current == 1


def test_where_a_thread_fewer_is_faster_it_stays_and_a_noisy_window_costs_one_try() -> None:
    machine = Machine({2: 40.0, 1: 50.0})  # e.g. deep in a long context on a slow core
    threads = governed(machine)
    machine.decode(threads, 1000)
    assert threads.current == 1
    # The first window, then a try of a few tokens after 64, 128, 256 and 512 at one.
    tries = [n for i, n in enumerate(machine.used[WINDOW_TOKENS:]) if n == 2]
    assert len(tries) <= 4 * WINDOW_TOKENS
    machine.rates = {2: 80.0, 1: 50.0}
    machine.decode(threads, LONGEST_TRY_AFTER + 2 * WINDOW_TOKENS)
    assert threads.current == 2


class DrawingMachine(Machine):
    """A free machine where the app's drawing now and then stalls the full
    team for a moment: every `every`th token at the full team takes `stall`
    seconds more (a frame that lays the screen out, in the pseudo-terminal)."""

    def __init__(self, rates: dict[int, float], every: int, stall: float) -> None:
        super().__init__(rates)
        self.every, self.stall = every, stall

    def decode(self, threads: DecodeThreads, tokens: int) -> None:
        for _ in range(tokens):
            self.used.append(threads.current)
            self.now += 1 / self.rates[threads.current]
            if threads.current == 2 and len(self.used) % self.every == 0:
                self.now += self.stall
            threads.token_decoded()


@pytest.mark.parametrize("every", [23, 37, 41, 53])
def test_the_apps_own_drawing_does_not_send_the_team_to_a_thread_fewer(every: int) -> None:
    """Measured in the pseudo-terminal: the full team 85-90 tok/s, a thread
    fewer 70, and now and then a window of the team 20-30 % slower. Judged on
    that one window, a thread fewer won one reply in three and kept it for
    256 tokens; judged on the team's latest windows, it loses its tries."""
    machine = DrawingMachine({2: 88.0, 1: 72.0}, every=every, stall=0.03)
    threads = governed(machine)
    machine.decode(threads, 600)
    assert threads.current == 2
    assert machine.used.count(1) <= 6 * WINDOW_TOKENS  # tries, each one window


def test_the_time_between_replies_is_not_counted() -> None:
    machine, threads = settled()
    for _ in range(5):  # the user reads and writes for a minute each time
        machine.now += 60.0
        machine.start_reply(threads)
        machine.decode(threads, 50)
    assert threads.current == 2
    assert machine.used[100:].count(1) == 0


def test_a_reply_that_finds_another_program_running_starts_a_thread_fewer() -> None:
    machine, threads = settled()
    assert threads.current == 2
    machine.rates[2] = 4.0  # another program took a core while the user read
    machine.others = 1
    machine.start_reply(threads)
    assert threads.current == 1  # before the prompt: its batches leave the core too
    before = len(machine.used)
    machine.decode(threads, 4 * FIRST_TRY_AFTER)
    assert 2 not in machine.used[before:], "no stalled token while it runs"
    machine.others = 0  # it ended: the full team is tried when due, and wins
    machine.rates[2] = 80.0
    machine.decode(threads, FIRST_TRY_AFTER + 3 * WINDOW_TOKENS)
    assert threads.current == 2


def test_a_program_seen_at_the_start_but_gone_after_the_first_window_costs_one_window() -> None:
    machine, threads = settled()
    machine.others = 1  # a program that runs now and then, caught running
    machine.start_reply(threads)
    machine.others = 0
    before = len(machine.used)
    machine.decode(threads, 200)
    assert machine.used[before:].count(1) == 1 + WINDOW_TOKENS  # the first token opens it
    assert threads.current == 2


def test_a_program_seen_in_one_look_of_the_two_changes_nothing() -> None:
    machine, threads = settled()
    for first, second in ((1, 0), (0, 1), (1, None), (None, 1)):
        machine.others = first  # e.g. the terminal drawing the message just sent
        threads.look()
        machine.others = second
        threads.before_batches()
        assert threads.current == 2


def test_a_reply_that_finds_the_machine_free_again_starts_with_the_full_team_on_trial() -> None:
    machine, threads = settled()
    machine.rates[2] = 4.0  # found by the timings alone
    machine.decode(threads, 200)
    assert threads.current == 1
    machine.rates[2] = 80.0  # the program ended a few seconds ago
    machine.others = 0
    machine.now += 5.0
    machine.start_reply(threads)
    assert threads.current == 2
    machine.decode(threads, 1 + 3 * WINDOW_TOKENS)
    assert threads.current == 2
    # Busy after all (it was between two runs): a stalled token, then back.
    machine.rates[2] = 4.0
    machine.decode(threads, 40)
    machine.now += 5.0
    machine.start_reply(threads)
    before = len(machine.used)
    machine.decode(threads, 1 + 3 * WINDOW_TOKENS)
    assert threads.current == 1
    assert machine.used[before:].count(2) <= 2


def test_where_the_kernel_says_nothing_the_timings_alone_decide() -> None:
    machine, threads = settled()
    machine.start_reply(threads)  # no counters (not Linux)
    assert threads.current == 2
    machine.rates[2] = 4.0
    machine.decode(threads, 40)
    assert threads.current == 1
    machine.start_reply(threads)
    assert threads.current == 1


def test_counts_say_the_busy_count_in_the_status_bar() -> None:
    assert ThreadCounts(2, 2, busy=1).decode_text() == "2 decode (1 when busy)"
    assert ThreadCounts(1, 2).decode_text() == "1 decode"


# The real engine, with a program that takes a core.


@pytest.fixture
def llama_engine(engine: LlamaEngine) -> Iterator[LlamaEngine]:
    """The shared engine, its thread counts put back after the test."""
    info = engine.info
    decode = llama_cpp.llama_n_threads(engine.llama.ctx)
    batch = llama_cpp.llama_n_threads_batch(engine.llama.ctx)
    yield engine
    engine.use_threads(ThreadCounts(decode, batch))
    engine.info = info


STORY = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]


def reply(engine: LlamaEngine, seed: int, tokens: int = 200) -> Finished:
    finished = None
    for event in engine.stream_reply(
        STORY, SamplingSettings(max_tokens=tokens, seed=seed), threading.Event()
    ):
        if isinstance(event, Finished):
            finished = event
    assert finished is not None
    return finished


def running_programs() -> list[str]:
    """The names of the programs in the kernel's run queues now."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().split("(", 1)[1].rsplit(")", 1)
        except (OSError, IndexError, ValueError):
            continue
        if rest.split(maxsplit=1)[0] == "R":
            names.append(name)
    return names


def until_quiet(within_s: float = 30.0) -> None:
    """Waits until no other program has run on the cores for half a second
    (a server an earlier test stopped, a CI runner's own work): the reply a
    test times as the free machine's must be free. Skips, naming what ran,
    if the machine stays busy."""
    deadline = time.monotonic() + within_s
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if others_running() != 0:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 0.5:
            return
        time.sleep(0.01)
    pytest.skip(f"another program kept running for {within_s:g} s: {running_programs()}")


def free_reply(engine: LlamaEngine) -> Finished:
    """A reply on a quiet machine that timed the full team (a program that
    started meanwhile may have sent the reply to a thread fewer: then again)."""
    for _ in range(3):
        until_quiet()
        finished = reply(engine, seed=5)
        choice = engine.thread_choice
        if choice is not None and 2 in choice.rates:
            return finished
    pytest.skip(f"other programs kept the full team from a try: {running_programs()}")


@pytest.mark.skipif(usable_cores() != 2, reason="the busy program takes one of exactly two cores")
def test_the_real_engine_leaves_the_full_team_when_a_core_is_taken(
    llama_engine: LlamaEngine,
) -> None:
    llama_engine.use_threads(ThreadCounts(2, 2, busy=1, busy_batch=1))
    context = llama_engine.llama.ctx
    free = free_reply(llama_engine)
    choice = llama_engine.thread_choice
    assert choice is not None
    if choice.rates[2] > choice.rates[1]:  # two threads are faster on this machine
        assert llama_engine.decode_threads == 2
        assert llama_cpp.llama_n_threads_batch(context) == 2
    with busy_core():
        busy = reply(llama_engine, seed=5)
    assert llama_engine.decode_threads == 1
    # The next prompt's batches leave the busy core too.
    assert llama_cpp.llama_n_threads(context) == 1
    assert llama_cpp.llama_n_threads_batch(context) == 1
    # The same tokens whichever count decoded them.
    assert busy.token_ids == free.token_ids


@pytest.mark.skipif(usable_cores() != 2, reason="the busy program takes one of exactly two cores")
@pytest.mark.skipif(
    os.cpu_count() != usable_cores(),
    reason="the kernel's run queues count cores this process does not run on (a container's host)",
)
def test_the_real_engine_starts_a_reply_a_thread_fewer_when_another_program_was_busy(
    llama_engine: LlamaEngine,
) -> None:
    """The kernel says another program runs on a core: a prefill and the next
    reply's prompt and tokens leave that core from the start, with no stalled
    window; once it ends, the next reply starts with both."""
    llama_engine.use_threads(ThreadCounts(2, 2, busy=1, busy_batch=1))
    context = llama_engine.llama.ctx
    free = free_reply(llama_engine)
    choice = llama_engine.thread_choice
    assert choice is not None
    if choice.rates[2] <= choice.rates[1]:
        pytest.skip("a thread fewer is as fast on this machine: nothing to leave")
    free_rate = choice.rates[2]
    with busy_core():
        # The user pauses over a message: it is evaluated ahead, a thread fewer.
        assert llama_engine.prefill([{"role": "user", "content": "A story about the sea."}])
        assert llama_engine.decode_threads == 1
        assert llama_cpp.llama_n_threads_batch(context) == 1
        busy = reply(llama_engine, seed=5)
        assert choice.rates[2] == free_rate, "no window of the full team was timed"
        assert llama_engine.decode_threads == 1
        assert llama_cpp.llama_n_threads_batch(context) == 1
    until_quiet()
    again = reply(llama_engine, seed=5)
    assert choice.rates[2] != free_rate, "the full team was tried at once"
    assert llama_engine.decode_threads == 2
    assert busy.token_ids == free.token_ids == again.token_ids


def test_the_real_engine_gives_the_same_tokens_at_either_count(
    llama_engine: LlamaEngine,
) -> None:
    replies = {}
    for n, counts in ((1, ThreadCounts(1, 1)), (2, ThreadCounts(2, 2))):
        llama_engine.use_threads(counts)
        replies[n] = reply(llama_engine, seed=11, tokens=120)
    assert replies[1].token_ids == replies[2].token_ids
    assert len(replies[1].token_ids or ()) > 100
