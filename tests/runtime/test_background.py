"""Background threads: what the program waits for at its very end."""

from __future__ import annotations

import sys
import threading

import pytest

from chat.runtime.background import start_thread, threads_ended


@pytest.fixture(autouse=True)
def no_threads_left_by_other_tests() -> None:
    assert threads_ended(timeout=30)


def test_threads_ended_waits_for_the_threads_started_here() -> None:
    release = threading.Event()
    thread = start_thread("test-wait", release.wait, 10)
    assert threads_ended(timeout=0.05) is False
    release.set()
    assert threads_ended(timeout=10) is True
    assert not thread.is_alive()


def test_other_threads_are_not_waited_for() -> None:
    release = threading.Event()
    other = threading.Thread(target=release.wait, args=(10,), daemon=True)
    other.start()
    try:
        assert threads_ended(timeout=0.05) is True
    finally:
        release.set()
        other.join()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's names: Linux")
def test_a_thread_started_here_has_its_name_for_the_kernel_too() -> None:
    """`top -H` shows it, and the benchmark tells kvchat's threads from the UI's by it."""
    seen: list[str] = []

    def read_own_name() -> None:
        task = f"/proc/self/task/{threading.get_native_id()}/comm"
        with open(task) as comm:
            seen.append(comm.read().strip())

    start_thread("name-check", read_own_name).join(10)
    assert seen == ["kvchat-name-che"]  # the kernel keeps 15 bytes
