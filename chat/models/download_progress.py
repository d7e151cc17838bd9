"""A download's progress, as kvchat reports it: huggingface_hub's progress-bar
calls (and a plain URL's chunks) turned into `DownloadProgress` reports at a
pace a UI can draw, and a cancel that stops the transfer at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from chat.models.hub_spec import DownloadCancelled

_REPORT_EVERY_S = 0.1
"""At most ten progress reports a second: a UI redraws no faster."""
_SPEED_WINDOW_S = 5.0
"""Speed is measured over the last seconds, so that it follows the network."""

T = TypeVar("T")


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report. Byte counts cover every file of the model."""

    file: str
    """The file being transferred (or checked)."""
    part: int
    """Which file, from 1, of `parts` (a split model has several)."""
    parts: int
    done: int
    total: int
    speed: float
    """Bytes per second over the last few seconds."""
    seconds_left: float | None
    """At that speed; None while the speed is not known yet."""
    verifying: bool = False
    """True while the finished file is checked against the repo's SHA-256."""


ProgressCallback = Callable[[DownloadProgress], None]


class Meter:
    """Turns huggingface_hub's progress-bar calls into `DownloadProgress`
    reports, and stops the transfer when `cancel` is set: the bar's `update`
    raises, huggingface_hub deletes its temporary file."""

    def __init__(
        self, report: ProgressCallback, cancel: threading.Event, total: int, parts: int
    ) -> None:
        self._report = report
        self._cancel = cancel
        self._total = total
        self._parts = parts
        self._finished = 0  # bytes of the files done
        self._current = 0  # bytes of the file in transfer
        self._file = ""
        self._part = 1
        self._samples: deque[tuple[float, int]] = deque()
        self._last_report = 0.0

    def start_file(self, name: str, part: int) -> None:
        self._file, self._part, self._current = name, part, 0
        self._check_cancel()

    def finish_file(self, size: int) -> None:
        self._finished += size
        self._current = 0
        self._send(force=True)

    def bar_class(self) -> type:
        """A class huggingface_hub can use as `tqdm_class` (it only creates it
        with keyword arguments, calls `update` and uses it as a context manager)."""
        meter = self

        class Bar:
            def __init__(
                self, *args: Any, total: int | None = None, initial: int = 0, **kwargs: Any
            ) -> None:
                meter.began(total, initial)

            def update(self, n: float | None = 1) -> None:
                meter.advanced(int(n or 0))

            def close(self) -> None:
                pass

            def __enter__(self) -> Bar:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

        return Bar

    def began(self, total: int | None, initial: int) -> None:
        if self._total == 0 and total:  # a plain URL: the size comes with the answer
            self._total = total
        self._current = initial
        self._check_cancel()

    def advanced(self, n: int) -> None:
        self._current += n  # negative when a resume was refused and it starts over
        self._check_cancel()
        self._send()

    def verified(self, done: int) -> None:
        self._check_cancel()
        self._send(verifying=done)

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise DownloadCancelled("The download was cancelled.")

    def _send(self, force: bool = False, verifying: int | None = None) -> None:
        now = time.monotonic()
        done = self._finished + self._current
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > _SPEED_WINDOW_S:
            self._samples.popleft()
        if not force and now - self._last_report < _REPORT_EVERY_S:
            return
        self._last_report = now
        first_time, first_done = self._samples[0]
        elapsed = now - first_time
        speed = (done - first_done) / elapsed if elapsed > 0 else 0.0
        total = max(self._total, done)
        left = (total - done) / speed if speed > 0 else None
        self._report(
            DownloadProgress(
                file=self._file,
                part=self._part,
                parts=self._parts,
                done=done if verifying is None else self._finished + verifying,
                total=total,
                speed=speed if verifying is None else 0.0,
                seconds_left=left if verifying is None else None,
                verifying=verifying is not None,
            )
        )


def cancellable(work: Callable[[], T], cancel: threading.Event) -> T:
    """Run `work` in a daemon thread and return its result, or raise
    `DownloadCancelled` as soon as `cancel` is set, even while the network is
    silent (the transfer itself stops at its next chunk or time-out)."""
    outcome: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name="kvchat-download", daemon=True).start()
    while not done.wait(0.05):
        if cancel.is_set():
            raise DownloadCancelled("The download was cancelled.")
    ok, value = outcome[0]
    if ok:
        return cast(T, value)
    raise value
