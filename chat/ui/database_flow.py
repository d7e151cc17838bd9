"""Opening the conversation database at start. One that kvchat cannot use
(damaged, or from a newer kvchat) is left untouched, and the user decides:
move it aside and start a new one, go on without saving, or quit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.app import App

from chat.conversations.store import (
    CorruptDatabaseError,
    NewerSchemaError,
    Store,
    StoreError,
    move_aside,
)


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

    async def open(self) -> None:
        try:
            store = Store(self._path)
        except (CorruptDatabaseError, NewerSchemaError) as error:
            from chat.ui.screens.dialogs import StorageProblemScreen

            self._app.push_screen(StorageProblemScreen(str(error)), self._choice)
            return
        except StoreError as error:
            self._cannot_open(error)
            return
        await self._use(store)

    def _cannot_open(self, error: StoreError) -> None:
        self._unavailable(f"cannot open {self._path}")
        self._app.notify(str(error), title="Not saving", severity="error", timeout=15, markup=False)

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
