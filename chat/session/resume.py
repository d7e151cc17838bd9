"""Instant resume: a conversation's KV cache is saved when it is left, and put
back before its next reply, so that reply evaluates only the new message.

Saving copies the cache out of the engine at once (milliseconds, between
engine calls) and writes it to disk in a background thread, so leaving a
conversation or quitting never waits for the disk; `wait` bounds how long
quitting waits for writes to finish. A state is restored only when it was
made for this engine's identity (model file content, cache settings) and
holds more of the next prompt than the KV cache does already. Failures never
reach the user: a state that cannot be saved or used is a note in the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from chat.engine.kv_state import KvState, StateIdentity
from chat.engine.protocol import Engine
from chat.engine.state_cache import StateCache, note
from chat.errors import EngineClosedError
from chat.runtime.background import start_thread

SAVE_WAIT_S = 0.5
"""How long saving waits for an engine call under way (a prefill's batch)."""

WRITE_WAIT_S = 0.5
"""On quit, the least time the states copied out get to be written (the copy
may have waited most of the quit's time for the engine)."""


def conversation_key(database: object, conversation_id: int) -> str:
    """The key states are saved under: the database file and the conversation."""
    return f"{database}#{conversation_id}"


def conversation_id_of(key: str, database: object) -> int | None:
    """The conversation `key` was made for by `conversation_key`, when it is one
    of `database`'s; else None."""
    prefix = f"{database}#"
    number = key[len(prefix) :] if key.startswith(prefix) else ""
    return int(number) if number.isdigit() else None


@dataclass(frozen=True)
class _Pending:
    state: KvState
    identity: StateIdentity
    key: str


class Resumer:
    """Saves and restores KV cache states through `cache`. Thread-safe."""

    def __init__(self, cache: StateCache) -> None:
        self.cache = cache
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        """States copied out but not yet written: a conversation left and
        reopened at once finds its state here."""
        self._writers: list[threading.Thread] = []

    def save_in_background(
        self, engine: Engine, conversation_key: str, wait: float = SAVE_WAIT_S
    ) -> bool:
        """Copy what `engine`'s KV cache holds now (call it before the engine is
        used for another conversation) and write it to the cache folder in a
        background thread. Returns False when there was nothing to save: an
        empty cache, an engine busy for longer than `wait` seconds, or closed."""
        if self.cache.limit_bytes <= 0:
            return False
        try:
            state = engine.save_state(wait)
        except EngineClosedError:
            return False
        if state is None:
            return False
        pending = _Pending(state, engine.state_identity(), conversation_key)
        with self._lock:
            self._pending.append(pending)
            self._writers = [thread for thread in self._writers if thread.is_alive()]
            self._writers.append(start_thread("save-kv-state", self._write, pending))
        return True

    def _write(self, pending: _Pending) -> None:
        try:
            self.cache.put(pending.state, pending.identity, pending.key)
        except Exception as error:  # a daemon thread: nothing may reach stderr
            note(f"a KV cache state was not saved: {error!r}")
        finally:
            with self._lock:
                self._pending.remove(pending)

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the states being written; False if
        one is still being written (it is then lost, never left half-written)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            writers = list(self._writers)
        for thread in writers:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in writers)

    def restore_for(self, engine: Engine, prompt_tokens: Sequence[int]) -> int:
        """Before a reply (or a prefill) of `prompt_tokens`: restore the saved
        state that holds the longest prefix of it, if that is more than the KV
        cache holds already. Returns how many prompt tokens the restored state
        holds (0: nothing restored)."""
        identity = engine.state_identity()
        try:
            held = engine.cached_prefix(prompt_tokens)
            best, best_shared = self._best_pending(identity, prompt_tokens, held)
            found = self.cache.find(identity, prompt_tokens, longer_than=best_shared)
            if found is not None:
                best, best_shared = found, found.common_prefix(prompt_tokens)
            if best is None or not engine.restore_state(best):
                return 0
        except EngineClosedError:
            return 0
        return best_shared

    def _best_pending(
        self, identity: StateIdentity, tokens: Sequence[int], held: int
    ) -> tuple[KvState | None, int]:
        best, best_shared = None, held
        with self._lock:
            pending = list(self._pending)
        for each in pending:
            if each.identity != identity:
                continue
            shared = each.state.common_prefix(tokens)
            if shared > best_shared:
                best, best_shared = each.state, shared
        return best, best_shared

    def resumable(self, engine: Engine, database: object) -> set[int]:
        """The conversations of `database` with a saved state `engine` can restore."""
        identity = engine.state_identity()
        keys = self.cache.resumable(identity)
        with self._lock:
            keys.update(each.key for each in self._pending if each.identity == identity)
        ids = (conversation_id_of(key, database) for key in keys)
        return {each for each in ids if each is not None}

    def problem(self) -> str | None:
        """Why states are not being saved (a sentence naming the folder), or None."""
        return self.cache.problem()
