"""The folder of saved KV cache states (instant resume), with a size limit.

The folder is its own index: each `*.kvstate` file's header says which
engine identity and conversation it belongs to and which tokens it holds, and
its modification time is when it was last saved or used. So several kvchat
processes can share the folder without an index to keep consistent, and a
file that disappears or is damaged costs nothing but itself. Headers are read
once per file (a file is never changed in place: a new state is a new file).

Nothing here stops the app: a folder that is read-only, full or cannot be
created only means states are not saved (`problem()` says why, and the log
has a note); a file that cannot be trusted is skipped with a note in the log.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chat import paths
from chat.engine import llama_log
from chat.engine.kv_state import (
    KvState,
    StateFileError,
    StateHeader,
    StateIdentity,
    common_prefix,
    read_header,
    read_state,
    write_state,
)

SUFFIX = ".kvstate"
STALE_TEMPORARY_S = 3600.0
"""A temporary file older than this was left by a process that died while writing."""


def note(text: str) -> None:
    """A line in kvchat's log (the llama.cpp log in the state folder). Never raises."""
    llama_log.write(f"kvchat: {text}\n")


@dataclass(frozen=True)
class _Entry:
    path: Path
    header: StateHeader
    size: int
    used: int
    """Last saved or used (the file's modification time, ns)."""


class StateCache:
    """Saved KV cache states in `folder`, at most `limit_bytes` of them: the
    least recently used are forgotten first. Thread-safe; several processes
    may share the folder."""

    def __init__(self, folder: Path, limit_bytes: int) -> None:
        self.folder = folder
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._headers: dict[tuple[str, int, int], StateHeader] = {}
        """Headers read, by (file name, size, inode): a file never changes in place."""
        self._noted: set[tuple[str, int, int]] = set()
        """Files already noted as unusable (noted once, not at every look)."""
        self._problem: str | None = None

    def problem(self) -> str | None:
        """Why the last save failed (a sentence naming the folder); None once one succeeds."""
        return self._problem

    # -- saving --------------------------------------------------------------------

    def put(self, state: KvState, identity: StateIdentity, conversation_key: str) -> bool:
        """Save `state` for `conversation_key`. Older states of that conversation
        whose tokens are a prefix of this one's are removed; nothing is written
        when one already holds all of it. Then the least recently used states
        go until the folder fits the limit. Returns True when the state is
        saved (False: too big for the limit, or the folder cannot be written)."""
        if not state.tokens:
            return False
        if len(state.data) > self.limit_bytes:
            return False
        digest = identity.digest()
        name = _file_name(digest, conversation_key, state.tokens)
        with self._lock:
            entries = self._entries()
            superseded = []
            for entry in entries:
                header = entry.header
                if header.identity != digest or header.conversation_key != conversation_key:
                    continue
                shared = common_prefix(header.tokens, state.tokens)
                if shared == len(state.tokens) and entry.path.name != name:
                    _touch(entry.path)  # an older state holds all of this one
                    return True
                if shared == len(header.tokens) and entry.path.name != name:
                    superseded.append(entry)
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                write_state(self.folder / name, state, identity, conversation_key, time.time())
            except OSError as error:
                self._problem = (
                    f"KV cache states are not saved: {paths.folder_problem(self.folder, error)}."
                )
                note(self._problem)
                return False
            self._problem = None
            _touch(self.folder / name)
            for entry in superseded:
                _remove(entry.path)
            self._evict(keep=name)
        return True

    def _evict(self, keep: str) -> None:
        """Remove the least recently used state files until the folder fits the
        limit. Files this kvchat cannot read (damaged, or a newer format) count
        and go by the same rule."""
        files = sorted(self._files(), key=lambda item: item[1].st_mtime_ns)
        total = sum(stat.st_size for _, stat in files)
        for path, stat in files:
            if total <= self.limit_bytes:
                break
            if path.name != keep and _remove(path):
                total -= stat.st_size

    # -- finding -------------------------------------------------------------------

    def find(
        self, identity: StateIdentity, tokens: Sequence[int], longer_than: int = 0
    ) -> KvState | None:
        """The saved state for `identity` that holds the longest prefix of
        `tokens` (more than `longer_than` tokens of it), read and checked whole,
        and marked used; None when there is none. A file that turns out damaged
        is skipped (with a note in the log) for the next best."""
        digest = identity.digest()
        with self._lock:
            candidates = []
            for entry in self._entries():
                if entry.header.identity != digest:
                    continue
                shared = common_prefix(entry.header.tokens, tokens)
                if shared > longer_than:
                    candidates.append((shared, entry.used, entry))
            candidates.sort(key=lambda item: (item[0], item[1]), reverse=True)
            for _, _, entry in candidates:
                try:
                    _, state = read_state(entry.path, identity)
                except FileNotFoundError:
                    continue
                except (StateFileError, OSError) as error:
                    self._note_unusable(entry.path, error)
                    continue
                _touch(entry.path)
                return state
        return None

    def resumable(self, identity: StateIdentity) -> set[str]:
        """The conversation keys that have a saved state for `identity`."""
        digest = identity.digest()
        with self._lock:
            return {
                entry.header.conversation_key
                for entry in self._entries()
                if entry.header.identity == digest
            }

    def keys(self) -> set[str]:
        """Every conversation key with a saved state, for any identity."""
        with self._lock:
            return {entry.header.conversation_key for entry in self._entries()}

    def total_bytes(self) -> int:
        with self._lock:
            return sum(entry.size for entry in self._entries())

    # -- the folder ----------------------------------------------------------------

    def _files(self) -> list[tuple[Path, os.stat_result]]:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []  # not made yet, or not readable: no states
        found = []
        now = time.time()
        for name in names:
            path = self.folder / name
            try:
                stat = path.stat()
            except OSError:
                continue
            if name.endswith(SUFFIX) and not name.startswith("."):
                found.append((path, stat))
            elif name.endswith(".tmp") and now - stat.st_mtime > STALE_TEMPORARY_S:
                _remove(path)  # left by a process that died while writing
        return found

    def _entries(self) -> list[_Entry]:
        """The usable state files, with their headers."""
        entries = []
        seen = set()
        for path, stat in self._files():
            key = (path.name, stat.st_size, stat.st_ino)
            seen.add(key)
            header = self._headers.get(key)
            if header is None:
                if key in self._noted:
                    continue
                try:
                    header = read_header(path)
                except FileNotFoundError:
                    continue
                except (StateFileError, OSError) as error:
                    self._note_unusable(path, error, key)
                    continue
                self._headers[key] = header
            entries.append(_Entry(path, header, stat.st_size, stat.st_mtime_ns))
        for gone in self._headers.keys() - seen:  # removed or replaced files
            del self._headers[gone]
        return entries

    def _note_unusable(
        self, path: Path, error: Exception, key: tuple[str, int, int] | None = None
    ) -> None:
        if key is None:
            try:
                stat = path.stat()
            except OSError:
                return
            key = (path.name, stat.st_size, stat.st_ino)
        self._headers.pop(key, None)
        if key not in self._noted:
            self._noted.add(key)
            note(f"a saved KV cache state is ignored: {error}")


def _file_name(identity: str, conversation_key: str, tokens: Sequence[int]) -> str:
    conversation = hashlib.sha256(conversation_key.encode()).hexdigest()[:16]
    held = hashlib.sha256(str(list(tokens)).encode()).hexdigest()[:16]
    return f"{conversation}-{identity[:8]}-{held}{SUFFIX}"


def _touch(path: Path) -> None:
    """Record that `path` was used now. Nanoseconds from the clock, not the
    kernel's coarse file times, so that uses milliseconds apart keep their order."""
    now = time.time_ns()
    with contextlib.suppress(OSError):  # a read-only folder: use is not recorded
        os.utime(path, ns=(now, now))


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
