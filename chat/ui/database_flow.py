"""Opening the conversation database at start. One that kvchat cannot use
(damaged, or from a newer kvchat) is left untouched, and the user decides:
move it aside and start a new one (a damaged one only), go on without saving,
or quit. One that
cannot be opened at all (its folder cannot be created, is read-only or full)
is tried again every few seconds: chatting goes on meanwhile, and saving
starts by itself once the folder works."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.app import App
from textual.timer import Timer

from chat.conversations.store import (
    CorruptDatabaseError,
    NewerSchemaError,
    Store,
    StoreError,
    move_aside,
)
from chat.runtime.background import in_thread

# How often a database that could not be opened is tried again.
RETRY_S = 3.0


class DatabaseFlow:
    def __init__(
        self,
        app: App[None],
        path: Path,
        use: Callable[[Store], Awaitable[None]],
        unavailable: Callable[[str], None],
    ) -> None:
        """`use`: called with the open store; `unavailable`: with the reason there
        is none (conversations are then not saved)."""
        self._app = app
        self._path = path
        self._use = use
        self._unavailable = unavailable
        self._retry: Timer | None = None
        self._trying = False

    async def open(self) -> None:
        try:
            store = Store(self._path)
        except (CorruptDatabaseError, NewerSchemaError) as error:
            from chat.ui.screens.dialogs import StorageProblemScreen

            # A newer kvchat's database is sound: it is never moved aside.
            newer = isinstance(error, NewerSchemaError)
            self._app.push_screen(
                StorageProblemScreen(str(error), can_move=not newer), self._choice
            )
            return
        except StoreError as error:
            self._cannot_open(error)
            return
        await self._use(store)

    def _cannot_open(self, error: StoreError) -> None:
        self._unavailable(error.brief)
        self._app.notify(
            f"{error}\nChatting goes on: kvchat tries again every few seconds and saves "
            "this conversation once it can.",
            title="Not saving",
            severity="error",
            timeout=15,
            markup=False,
        )
        if self._retry is None:
            self._retry = self._app.set_interval(RETRY_S, self._try_again)

    async def _try_again(self) -> None:
        if self._trying:
            return  # the last try still waits (a database locked by another program)
        self._trying = True
        try:
            store = await in_thread("open-database", Store, self._path)
        except StoreError as error:
            self._unavailable(error.brief)  # the reason may have changed; said once
            return
        finally:
            self._trying = False
        if self._retry is not None:
            self._retry.stop()
            self._retry = None
        await self._use(store)
        self._app.notify(
            f"Saving again: conversations are saved in {self._path}.",
            title="Saving",
            timeout=8,
            markup=False,
        )

    async def _choice(self, choice: str | None) -> None:
        if choice == "quit":
            self._app.exit()
            return
        if choice != "move":
            self._unavailable(f"{self._path} cannot be used (kept as it is)")
            return
        try:
            moved = move_aside(self._path)
            store = Store(self._path)
        except StoreError as error:
            self._cannot_open(error)
            return
        self._app.notify(
            f"The old database is kept as {moved}. New conversations are saved in {self._path}.",
            title="Started a new database",
            timeout=15,
            markup=False,
        )
        await self._use(store)
