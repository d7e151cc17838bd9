"""`chat` as a user runs it, for the benchmark (or another program: the
floor app of chat.bench.textual_floor): in a 120x40 pseudo-terminal, sent
keys, with what it draws read back."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from chat.bench.startup import ESCAPE_SEQUENCE
from chat.ui.terminal_input import SYNC_START as FRAME_START

SYNC_QUERY = b"\x1b[?2026$p"
"""The app asks whether the terminal supports synchronized output (mode 2026)..."""
SYNC_SUPPORTED = b"\x1b[?2026;2$y"
"""...and this answer says it does (reset for now: the app sets it for each frame)."""
SYNC_START = FRAME_START.encode()
"""What starts each frame the app draws (kvchat's driver writes it)."""


class Terminal:
    """A program (`argv`) on a 120x40 pseudo-terminal; what it draws is kept."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the program
            try:
                os.execve(argv[0], list(argv), env)
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.screen = bytearray()
        """Everything drawn: extended in place (a bytes object was copied whole
        at each read, however long it had grown)."""

    @classmethod
    def chat(cls, model: Path, env: dict[str, str], args: Sequence[str] = ()) -> Terminal:
        """`chat --model MODEL [ARGS]`, as a user starts it."""
        return cls([sys.executable, "-m", "chat", "--model", str(model), *args], env)

    def _read(self) -> None:
        """Read what the app drew. Like most terminals in use, this one says it
        supports synchronized output when the app asks: each frame is then drawn
        between a begin and an end mark, and the frames can be counted."""
        data = os.read(self.fd, 1 << 16)
        if SYNC_QUERY in data:
            os.write(self.fd, SYNC_SUPPORTED)
        self.screen += data

    def frames_since(self, offset: int) -> int:
        """Frames drawn since `len(self.screen)` was `offset`."""
        return self.screen.count(SYNC_START, offset)

    def wait_for(self, mark: bytes, timeout: float = 300) -> None:
        """Read until `mark` is drawn (only what arrives from now on counts)."""
        start = len(self.screen)
        deadline = time.monotonic() + timeout
        while True:
            readable, _, _ = select.select([self.fd], [], [], max(0, deadline - time.monotonic()))
            if not readable:
                raise TimeoutError(f"the app did not show {mark!r} within {timeout:.0f} s")
            self._read()
            if mark in ESCAPE_SEQUENCE.sub(b"", self.screen[max(0, start - 256) :]):
                return

    def wait_until(self, done: Callable[[], bool], timeout: float = 300) -> None:
        """Read what the app draws until `done()` (checked at least every 50 ms)."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the app did not get there within {timeout:.0f} s")
            readable, _, _ = select.select([self.fd], [], [], 0.05)
            if readable:
                try:
                    self._read()
                except OSError:
                    tail = ESCAPE_SEQUENCE.sub(b"", self.screen)[-600:].decode(errors="replace")
                    raise RuntimeError(f"the app exited; its last output: {tail}") from None

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def type_in_background(self, text: str) -> None:
        """Send `text` as keystrokes, as fast as the app reads them."""
        data = text.encode()

        def write() -> None:
            for offset in range(0, len(data), 4096):
                try:
                    os.write(self.fd, data[offset : offset + 4096])
                except OSError:  # the app quit
                    return

        threading.Thread(target=write, daemon=True).start()

    def seconds_to_exit(self, timeout: float) -> float:
        """Seconds until the app exits (reading what it draws meanwhile)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                self.pid = 0
                return time.monotonic() - started
            readable, _, _ = select.select([self.fd], [], [], 0.01)
            if readable:
                try:
                    self._read()
                except OSError:  # closed: the app is exiting
                    time.sleep(0.01)
        raise TimeoutError(f"the app was still running {timeout:.0f} s after Ctrl+Q")

    def close(self) -> None:
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)
