"""Whether other programs are running on the machine's cores right now, from
the kernel's run queues: so that a reply can start with the decode threads
the machine has room for (chat.engine.decode_threads).

The thread chooser finds a busy machine by timing tokens, so the reply that
first met another program evaluated its prompt with a stalled team: on a
2-core machine with one core taken, a 20-token prompt took 0.26-0.66 s to its
first token with two threads against 0.12-0.13 with one, a 200-token paste
1.6-1.9 s against 1.1, and in the app itself, its UI drawing meanwhile, 5 s
(docs/performance.md, "The kernel says what runs on the cores"). The kernel
knows already: `/proc/loadavg` counts the threads running or waiting for a
core, and `/proc/self/task` says which of them are this process's.

A look is one instant, so a program that runs now and then may be seen or
missed: the chooser looks twice before prompt batches (a reply's, a
prefill's), again after the first window, and its timings decide from there
on. Where the files do not exist (not Linux), nothing is known and the
timings alone decide.

The run queues are the whole kernel's: in a container, the host's, with its
every core. So other programs count only past the cores a team of decode
threads leaves free (`others_in_the_way`): on a 2-core machine decoding with
two, any; in a container given 2 of a 64-core host's cores, only a host so
busy that no core is left over, and otherwise the timings decide, as where
there is no /proc."""

from __future__ import annotations

import os
from pathlib import Path


def others_in_the_way(
    team: int, proc: Path = Path("/proc"), cores: int | None = None
) -> int | None:
    """Other programs' threads beyond the cores that a team of `team` decode
    threads leaves free of the machine's `cores` (all the kernel runs, by
    default; None where not known)."""
    others = others_running(proc)
    cores = cores or os.cpu_count()
    if others is None or cores is None:
        return None
    return max(0, others - max(0, cores - team))


def others_running(proc: Path = Path("/proc")) -> int | None:
    """Threads of other programs running or waiting for a core now (None
    where the kernel does not say). This process's own are read before and
    after the machine's count, and the larger taken: one of its threads
    starting or stopping meanwhile is not counted as another program's."""
    try:
        before = _own_running(proc)
        with open(proc / "loadavg") as loadavg:
            running = int(loadavg.read().split()[3].split("/")[0])
        own = max(before, _own_running(proc))
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - own)


def _own_running(proc: Path) -> int:
    """This process's threads in the run queue ("R" in each task's stat,
    after its name, which may hold spaces and parentheses)."""
    tasks = proc / "self" / "task"
    count = 0
    for task in os.listdir(tasks):
        try:
            with open(tasks / task / "stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split(maxsplit=1)[0]
        except (OSError, IndexError):  # the thread ended meanwhile
            continue
        count += state == "R"
    return count
