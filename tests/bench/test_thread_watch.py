"""The benchmark's reading of how a thread spent a reply (kernel schedstat)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from chat.bench.terminal import ThreadWatch, thread_cpu

pytestmark = pytest.mark.skipif(
    not os.path.exists(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/schedstat"),
    reason="no schedstat in this kernel",
)


def test_a_thread_that_works_then_sleeps_is_on_a_core_then_blocked() -> None:
    watch = ThreadWatch(os.getpid())
    watch.READ_EVERY_S = 0.0
    done = threading.Event()

    def work_then_sleep() -> None:
        # 0.3 s on a core by the thread's own clock: a busy machine may keep
        # it waiting for one meanwhile, which is not what is tested here.
        until = time.thread_time() + 0.3
        while time.thread_time() < until:
            pass
        done.wait(0.4)  # asleep, as a thread waiting for the GIL is

    thread = threading.Thread(target=work_then_sleep)
    thread.start()
    while thread.is_alive():
        watch.read()
        time.sleep(0.02)
    times = watch.busiest(besides=os.getpid())
    assert times is not None
    assert times.on_cpu_s >= 0.2
    assert times.blocked_s >= 0.25
    assert abs(times.on_cpu_s + times.waiting_for_core_s + times.blocked_s - times.wall_s) < 1e-6


def test_a_threads_cpu_is_read_finer_than_clock_ticks() -> None:
    """A UI's tenths of a second over a reply: clock ticks are 10 ms."""
    me = threading.get_native_id()
    before = thread_cpu(os.getpid())[me]
    until = time.thread_time() + 0.003  # 3 ms on a core: under one clock tick
    while time.thread_time() < until:
        pass
    used = thread_cpu(os.getpid())[me] - before
    assert 0.003 <= used < 0.05
    assert round(used, 9) != round(used, 2)  # not counted in whole ticks
