"""Other programs running on the cores now, from the kernel's run queues
(chat.engine.machine_load)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chat.bench.workload import busy_core
from chat.engine.machine_load import others_in_the_way, others_running


def proc(tmp_path: Path, running: int, own_states: str) -> Path:
    """A /proc with `running` threads in the machine's run queues, and this
    process's threads in `own_states` (one state letter each)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "loadavg").write_text(f"0.52 0.40 0.31 {running}/412 9876\n")
    for tid, state in enumerate(own_states, start=100):
        task = tmp_path / "self" / "task" / str(tid)
        task.mkdir(parents=True)
        # A name with spaces and parentheses, as a thread may be given one.
        (task / "stat").write_text(f"{tid} (kv (chat) x) {state} 1 2 3 4 5\n")
    return tmp_path


def test_others_are_the_running_threads_that_are_not_this_processes(tmp_path: Path) -> None:
    assert others_running(proc(tmp_path, running=3, own_states="RSSR")) == 1


def test_this_process_alone_is_nobody_else(tmp_path: Path) -> None:
    assert others_running(proc(tmp_path, running=1, own_states="RSS")) == 0


def test_without_the_kernels_counts_nothing_is_known(tmp_path: Path) -> None:
    assert others_running(tmp_path) is None
    (tmp_path / "loadavg").write_text("garbled\n")
    (tmp_path / "self" / "task").mkdir(parents=True)
    assert others_running(tmp_path) is None


def test_on_two_cores_any_other_program_is_in_a_full_teams_way(tmp_path: Path) -> None:
    machine = proc(tmp_path, running=2, own_states="RS")
    assert others_in_the_way(2, machine, cores=2) == 1
    assert others_in_the_way(1, machine, cores=2) == 0


def test_a_hosts_other_programs_count_only_past_the_cores_the_team_leaves_free(
    tmp_path: Path,
) -> None:
    """In a container the run queues are the host's: 5 others on 64 cores
    leave a team of 4 alone; 62 others leave it 2 cores, not 4."""
    machine = proc(tmp_path, running=5, own_states="S")
    assert others_in_the_way(4, machine, cores=64) == 0
    crowded = proc(tmp_path / "crowded", running=62, own_states="S")
    assert others_in_the_way(4, crowded, cores=64) == 2


def test_without_the_kernels_counts_nobody_is_in_the_way(tmp_path: Path) -> None:
    assert others_in_the_way(2, tmp_path, cores=2) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's run queues")
def test_a_busy_program_is_seen_and_this_process_is_not() -> None:
    with busy_core():
        seen = [others_running() for _ in range(20)]
    assert all(count is not None and count >= 1 for count in seen)
