"""ChatApp: loads the model in the background and hosts the chat screen."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from textual.app import App
from textual.binding import Binding

from chat import paths
from chat.config import ModelSettings, Settings
from chat.engine.base import Engine
from chat.errors import KvchatError
from chat.models import ModelCandidate, how_to_get_a_model
from chat.store import CorruptDatabaseError, NewerSchemaError, Store, StoreError, move_aside
from chat.ui.messages import ModelLoaded, ModelLoadFailed
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.dialogs import StorageProblemScreen

EngineFactory = Callable[[Path, ModelSettings], Engine]


def load_llama(path: Path, settings: ModelSettings) -> Engine:
    # Imported here so that the UI starts drawing before llama.cpp is imported.
    from chat.engine.llama import load_engine

    return load_engine(path, settings, paths.log_file())


class ChatApp(App[None]):
    TITLE = "kvchat"
    CSS_PATH = "app.tcss"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True)]

    def __init__(
        self,
        settings: Settings,
        model: ModelCandidate | None,
        *,
        engine_factory: EngineFactory = load_llama,
        model_error: str | None = None,
        startup_problems: Sequence[str] = (),
        database: Path | None = None,
        resume: int | None = None,
    ) -> None:
        """`database`: the conversation database (default: paths.database_file());
        `resume`: the id of a saved conversation to open at start."""
        super().__init__()
        self.settings = settings
        self.model = model
        self.engine: Engine | None = None
        self._engine_factory = engine_factory
        self._model_error = model_error
        self._startup_problems = list(startup_problems)
        self.chat_screen = ChatScreen(settings)
        self.database = database if database is not None else paths.database_file()
        self.store: Store | None = None
        self._resume = resume

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Defaults for the app's own CSS variables; themes override them.
        return {
            "meter-system": "#7c6f9f",
            "meter-history": "#4a7fa8",
            "meter-new": "#5fa86b",
            "meter-reply": "#d7a04a",
            "meter-reserved": "#5a4a30",
            "meter-free": "#2a2d33",
            "user-message-background": "#1f2a36",
            "user-message-foreground": "#e6e6e6",
            "assistant-message-background": "#181a1f",
            "assistant-message-foreground": "#e6e6e6",
            "message-meta": "#9aa0a8",
            "code-background": "#101216",
            "code-foreground": "#e6e6e6",
            "outside-window": "#6b6f76",
            "error-panel-background": "#3a1d1d",
        }

    def get_default_screen(self) -> ChatScreen:
        return self.chat_screen

    def on_mount(self) -> None:
        # Start once the chat screen is on screen: the first frame never waits
        # for llama.cpp to be imported or the model to load.
        self.call_after_refresh(self._start)

    async def _start(self) -> None:
        await self._open_store()
        for problem in self._startup_problems:
            self.notify(problem, severity="warning", timeout=15)
        if self.model is None:
            if self._model_error:
                await self.chat_screen.show_problem(
                    f"{self._model_error}\n\n{how_to_get_a_model()}"
                )
            else:
                await self.chat_screen.show_problem(how_to_get_a_model(), no_model=True)
            return
        await self.chat_screen.show_loading(self.model.name)
        threading.Thread(
            target=self._load_model,
            args=(self.model.path, self.settings.model),
            name="kvchat-load",
            daemon=True,  # Ctrl+Q must not wait for a large model to finish loading
        ).start()

    def _load_model(self, path: Path, settings: ModelSettings) -> None:
        try:
            engine = self._engine_factory(path, settings)
        except KvchatError as error:
            self.post_message(ModelLoadFailed(str(error)))
        except Exception as error:  # llama.cpp failures we did not foresee
            self.post_message(ModelLoadFailed(f"Could not load the model {path}: {error}"))
        else:
            self.post_message(ModelLoaded(engine))

    async def on_model_loaded(self, message: ModelLoaded) -> None:
        self.engine = message.engine
        await self.chat_screen.show_model(message.engine)

    async def on_model_load_failed(self, message: ModelLoadFailed) -> None:
        await self.chat_screen.show_problem(message.error)

    async def action_quit(self) -> None:
        self.chat_screen.stop_generating()
        self.exit()

    def on_unmount(self) -> None:
        if self.store is not None:
            self.store.close()

    # -- the conversation database ----------------------------------------------

    async def _open_store(self) -> None:
        """Open the database; one kvchat cannot use is left untouched and the user
        decides what happens (StorageProblemScreen)."""
        try:
            store = Store(self.database)
        except (CorruptDatabaseError, NewerSchemaError) as error:
            self.push_screen(StorageProblemScreen(str(error)), self._storage_choice)
            return
        except StoreError as error:
            self.chat_screen.stop_saving(f"cannot open {self.database}")
            self.notify(str(error), title="Not saving", severity="error", timeout=15)
            return
        await self._use_store(store)

    async def _use_store(self, store: Store) -> None:
        self.store = store
        self.chat_screen.attach_store(store)
        if self._resume is not None:
            await self.chat_screen.open_conversation(self._resume)
            self._resume = None

    async def _storage_choice(self, choice: str | None) -> None:
        if choice == "quit":
            self.exit()
            return
        if choice == "move":
            try:
                moved = move_aside(self.database)
                store = Store(self.database)
            except StoreError as error:
                self.chat_screen.stop_saving(f"cannot open {self.database}")
                self.notify(str(error), title="Not saving", severity="error", timeout=15)
                return
            self.notify(
                f"The old database is kept as {moved}. New conversations are saved in "
                f"{self.database}.",
                title="Started a new database",
                timeout=15,
            )
            await self._use_store(store)
            return
        self.chat_screen.stop_saving(f"{self.database} cannot be used (kept as it is)")

    # -- switching models -------------------------------------------------------

    def switch_model(self, path: Path) -> None:
        """Load the model at `path` in the background and use it from the next reply.

        The running model stays if loading fails, and is closed only once the new
        one is in place."""
        self.run_worker(self._switch_model(path), group="switch-model", exclusive=True)

    async def _switch_model(self, path: Path) -> None:
        self.notify(f"Loading {path.name}…", title="Switching models")
        try:
            engine = await _in_daemon_thread(self._engine_factory, path, self.settings.model)
        except KvchatError as error:
            self.notify(str(error), title="Model not switched", severity="error", timeout=15)
            return
        except Exception as error:  # llama.cpp failures we did not foresee
            self.notify(
                f"Could not load the model {path}: {error}",
                title="Model not switched",
                severity="error",
                timeout=15,
            )
            return
        screen = self.chat_screen
        if screen.generating:
            # The reply thread uses the old engine: let it end before closing it.
            screen.action_stop()
            while screen.generating:
                await asyncio.sleep(0.05)
        old, self.engine = self.engine, engine
        self.model = ModelCandidate(path, engine_file_size(path), "switched")
        await screen.show_model(engine)
        if old is not None:
            old.close()
        self.notify(f"Now using {engine.info.name}.", title="Model switched")


def engine_file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


async def _in_daemon_thread(factory: EngineFactory, path: Path, settings: ModelSettings) -> Engine:
    """Run `factory` in a daemon thread (so Ctrl+Q never waits for a model to
    load) and await its result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Engine] = loop.create_future()

    def deliver(result: Engine | None, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            assert result is not None
            future.set_result(result)

    def load() -> None:
        try:
            engine, error = factory(path, settings), None
        except BaseException as raised:
            engine, error = None, raised
        with contextlib.suppress(RuntimeError):  # RuntimeError: the app has quit meanwhile
            loop.call_soon_threadsafe(deliver, engine, error)

    threading.Thread(target=load, name="kvchat-switch-model", daemon=True).start()
    return await future
