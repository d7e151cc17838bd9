"""The one way kvchat runs work off the UI thread: a daemon thread.

Why daemon threads, and not Textual thread workers or `asyncio.to_thread`:
loading a model, evaluating a prompt or counting a long conversation can take
many seconds inside llama.cpp, where Python cannot interrupt it. A worker or an
executor thread is joined when the app exits, so Ctrl+Q would wait for it; a
daemon thread never keeps the process alive. What must end cleanly before the
model is freed (the reply stream) is stopped and joined explicitly.

The other side of that choice: a process that exits while one of these threads
is inside llama.cpp crashes (the exit unloads the library under it). So the
program waits for them at the very end (`threads_ended`), and leaves at once,
without that unloading, when one cannot be stopped (a model load, a long
prompt being evaluated).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from chat.thread_names import name_this_thread

T = TypeVar("T")

PREFIX = "kvchat-"


def start_thread(name: str, target: Callable[..., object], *args: Any) -> threading.Thread:
    """Run `target(*args)` in a new daemon thread named `kvchat-<name>`, in
    Python and for the kernel too (chat.thread_names)."""

    def run() -> None:
        name_this_thread(PREFIX + name)
        target(*args)

    thread = threading.Thread(target=run, name=PREFIX + name, daemon=True)
    thread.start()
    return thread


def threads_ended(timeout: float) -> bool:
    """Wait up to `timeout` seconds for every thread started here to end; False
    when one still runs."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name.startswith(PREFIX):
            thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.name.startswith(PREFIX) for thread in threading.enumerate())


async def in_thread(name: str, function: Callable[..., T], *args: Any) -> T:
    """Await `function(*args)` run in a daemon thread (see the module docstring);
    its exception, if any, is raised here."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[T] = loop.create_future()

    def settle(outcome: T | None, error: BaseException | None) -> None:
        if result.done():  # the awaiting task was cancelled meanwhile
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(outcome)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome = function(*args)
        except BaseException as error:  # handed to the awaiting task
            call_soon(loop, settle, None, error)
        else:
            call_soon(loop, settle, outcome, None)

    start_thread(name, run)
    return await result


def call_soon(
    loop: asyncio.AbstractEventLoop,
    callback: Callable[..., object],
    *args: Any,
    context: contextvars.Context | None = None,
) -> None:
    """From one of these threads, `callback(*args)` on `loop` (in `context`,
    else a copy of this thread's); nothing when the loop is closed already
    (the app quit while the thread ran)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args, context=context)
