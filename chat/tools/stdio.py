"""The stdio transport: a tool server as a child process, JSON-RPC lines on
its stdin and stdout.

kvchat has its own instead of the SDK's `stdio_client` for what a client that
runs other people's programs must hold, and that one does not:

- the server gets only the environment its entry names, plus PATH (the SDK's
  adds HOME, USER, SHELL, TERM and LOGNAME, and a server inherits every
  secret through them no more, but not less than that either);
- its stderr goes to a log file of its own (never to kvchat's terminal, where
  Textual draws), bounded, and its last line names the cause when it dies;
- one message may be at most `message_limit` bytes: a line that grows past
  it stops the connection, before anything parses it;
- a line that is not JSON-RPC (a banner printed on stdout) is skipped and
  counted, so a server that only prints garbage is named as such;
- shutdown is bounded: stdin closed, then SIGTERM to the server's process
  group, then SIGKILL; a server that ignores signals cannot hang kvchat at
  quit, and its children (npx starts node) go with it.

The streams it yields are those `mcp.ClientSession` takes. Imported only by
chat.tools.connection, when a server is started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio
import anyio.abc
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from chat.errors import ConfigError
from chat.safe_files import human_limit
from chat.sanitize import sanitize_line
from chat.tools.config import StdioServerConfig
from chat.tools.references import expand

STDIN_CLOSE_GRACE_S = 1.0
"""After its stdin closes, how long a server may take to exit by itself."""
TERM_GRACE_S = 1.0
"""After SIGTERM, how long before SIGKILL."""
REAP_WAIT_S = 2.0
"""After SIGKILL, how long to wait for the process to be gone."""
STDERR_LOG_LIMIT = 1 << 20
"""Bytes of a server's stderr kept in its log file per run."""
GARBAGE_LIMIT = 1000
"""Lines that are not JSON-RPC before the server is given up on."""
STDERR_DRAIN_S = 0.5
"""After its stdout ends, how long to wait for the rest of a server's stderr."""
_LAST_LINE_LIMIT = 300


class StartError(Exception):
    """The server cannot be started; the text is why, in a few words."""


@dataclass
class Exit:
    """How the server process ended, in words: "exited with code 3"."""

    description: str
    last_stderr: str | None


def server_environment(config: StdioServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """PATH from kvchat's environment, then the entry's `env`, its `${VAR}`
    read from `environ`; nothing else (no HOME, no tokens)."""
    env = {"PATH": environ.get("PATH", os.defpath)}
    for name, value in config.env.items():
        try:
            env[name] = expand(value, environ, where=f"'env' {name}")
        except ConfigError as error:
            raise StartError(str(error)) from None
    return env


def resolve_command(command: str, env: Mapping[str, str]) -> str:
    """The program to run: a name is looked up on the server's PATH, a path
    (with a '/') must be an executable file."""
    if os.sep in command or (os.altsep and os.altsep in command):
        path = Path(command).expanduser()
        if not path.is_file():
            raise StartError(f"the command {_shown(command)} does not exist")
        if not os.access(path, os.X_OK):
            raise StartError(f"the command {_shown(command)} is not executable")
        return str(path)
    found = shutil.which(command, path=env.get("PATH", ""))
    if found is None:
        raise StartError(f"the command {_shown(command)} was not found on PATH")
    return found


class StdioTransport:
    """One run of one stdio server. `open()` spawns it and yields the
    session's streams; leaving it stops the server, within a bounded time."""

    def __init__(
        self,
        config: StdioServerConfig,
        environ: Mapping[str, str],
        log_path: Path,
        *,
        message_limit: int,
    ) -> None:
        self.config = config
        self._environ = environ
        self.log_path = log_path
        self.message_limit = message_limit
        self.pid: int | None = None
        self.ended = anyio.Event()
        """Set when the server's stdout has ended (it exited or closed it) or
        kvchat stopped reading it (a message too large, too much garbage)."""
        self.failure: str | None = None
        """Why kvchat stopped reading, when it did."""
        self.exit: Exit | None = None
        self.garbage_lines = 0
        self.first_garbage: str | None = None
        self._last_stderr: str | None = None
        self._stderr_done = anyio.Event()
        self._process: anyio.abc.Process | None = None

    @asynccontextmanager
    async def open(
        self,
    ) -> AsyncIterator[
        tuple[
            MemoryObjectReceiveStream[SessionMessage | Exception],
            MemoryObjectSendStream[SessionMessage],
        ]
    ]:
        env = server_environment(self.config, self._environ)
        program = resolve_command(self.config.command, env)
        log = _open_log(self.log_path)
        try:
            try:
                process = await anyio.open_process(
                    [program, *self.config.args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    start_new_session=True,
                )
            except OSError as error:
                raise StartError(
                    f"the command {_shown(self.config.command)} cannot be started: "
                    f"{(error.strerror or str(error)).lower()}"
                ) from None
            self._process = process
            self.pid = process.pid
            # Unbuffered both ways: the session waits for each message in turn.
            to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](
                16
            )
            to_server, from_session = anyio.create_memory_object_stream[SessionMessage](16)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read_stdout, process, to_session)
                tasks.start_soon(self._write_stdin, process, from_session)
                tasks.start_soon(self._read_stderr, process, log)
                try:
                    yield from_server, to_server
                finally:
                    with anyio.CancelScope(shield=True):
                        to_server.close()
                        from_server.close()
                        await self._stop(process)
                    tasks.cancel_scope.cancel()
        finally:
            if log is not None:
                log.close()

    def exit_text(self) -> str:
        """How the server ended, with its last stderr line: for messages."""
        if self.exit is None:
            return "stopped answering"
        text = self.exit.description
        if self.exit.last_stderr:
            text += f" (its last words on stderr: {self.exit.last_stderr})"
        return text

    async def _read_stdout(
        self,
        process: anyio.abc.Process,
        to_session: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            while True:
                try:
                    chunk = await process.stdout.receive(1 << 16)
                except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                    break
                start = 0
                while (newline := chunk.find(b"\n", start)) >= 0:
                    buffer += chunk[start:newline]
                    start = newline + 1
                    if not await self._deliver(bytes(buffer), to_session):
                        return
                    buffer.clear()
                buffer += chunk[start:]
                if len(buffer) > self.message_limit:
                    self.failure = f"sent a message larger than {human_limit(self.message_limit)}"
                    return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the session is gone: kvchat is closing it
        finally:
            # How it ended is known before the session hears of it (the
            # stream closes), so a call that was waiting can say it.
            try:
                await self._note_exit(process)
            finally:
                to_session.close()
                self.ended.set()

    async def _deliver(
        self, line: bytes, to_session: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> bool:
        """Pass one line on as a message; False when reading must stop."""
        if len(line) > self.message_limit:
            self.failure = f"sent a message larger than {human_limit(self.message_limit)}"
            return False
        line = line.rstrip(b"\r")
        if not line.strip():
            return True
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            self.garbage_lines += 1
            if self.first_garbage is None:
                self.first_garbage = _shown(line.decode("utf-8", "replace"))
            if self.garbage_lines >= GARBAGE_LIMIT:
                self.failure = f"wrote {GARBAGE_LIMIT} lines on stdout that are not MCP messages"
                return False
            return True
        await to_session.send(SessionMessage(message))
        return True

    async def _write_stdin(
        self, process: anyio.abc.Process, from_session: MemoryObjectReceiveStream[SessionMessage]
    ) -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for item in from_session:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the server went away: the reader sees its stdout end

    async def _read_stderr(self, process: anyio.abc.Process, log: IO[bytes] | None) -> None:
        assert process.stderr is not None
        written = 0
        tail = b""
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
            while True:
                try:
                    chunk = await process.stderr.receive(1 << 16)
                except anyio.EndOfStream:
                    self._stderr_done.set()
                    raise
                tail = (tail + chunk)[-4096:]
                lines = [line for line in tail.splitlines() if line.strip()]
                if lines:
                    self._last_stderr = _shown(lines[-1].decode("utf-8", "replace"))
                if log is not None and written < STDERR_LOG_LIMIT:
                    kept = chunk[: STDERR_LOG_LIMIT - written]
                    written += len(kept)
                    with suppress(OSError):
                        log.write(kept)
                        if written >= STDERR_LOG_LIMIT:
                            log.write(b"\n[kvchat: the rest of this run's stderr is not kept]\n")
                        log.flush()

    async def _note_exit(self, process: anyio.abc.Process) -> None:
        """Record how the process ended, if it has (its stdout ended)."""
        if self.failure is not None:
            return  # it may still run: kvchat stopped reading, _stop ends it
        await _exited(process, REAP_WAIT_S)
        # Its last words may still be in the stderr pipe.
        with anyio.move_on_after(STDERR_DRAIN_S):
            await self._stderr_done.wait()
        self.exit = Exit(_describe(process.returncode), self._last_stderr)

    async def _stop(self, process: anyio.abc.Process) -> None:
        """Close stdin, wait, SIGTERM the group, wait, SIGKILL it: each wait bounded."""
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        if not await _exited(process, STDIN_CLOSE_GRACE_S):
            _signal_group(process.pid, signal.SIGTERM)
            if not await _exited(process, TERM_GRACE_S):
                _signal_group(process.pid, signal.SIGKILL)
                await _exited(process, REAP_WAIT_S)
        # Children it left behind in its group (npx's node) go too.
        _signal_group(process.pid, signal.SIGKILL)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await stream.aclose()
        if self.exit is None and process.returncode is not None:
            self.exit = Exit(_describe(process.returncode), self._last_stderr)
        if process.returncode is not None:
            # Closes asyncio's subprocess transport now, not at garbage
            # collection (when the event loop may be gone).
            with anyio.move_on_after(REAP_WAIT_S):
                await process.aclose()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    # Polled: `wait()` also waits for the pipes to close, which a child that
    # inherited them may hold open long after the server itself exited.
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _describe(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _open_log(path: Path) -> IO[bytes] | None:
    """The server's stderr log, new for each run; None if it cannot be written
    (the server still runs: its stderr is then read and dropped)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "wb")
    except OSError:
        return None


def _shown(text: str) -> str:
    shown = sanitize_line(text)
    if len(shown) > _LAST_LINE_LIMIT:
        shown = shown[: _LAST_LINE_LIMIT - 3] + "..."
    return repr(shown)
