"""ChatApp: loads the model in the background and hosts the chat screen.

It also owns the colour theme: kvchat's themes (built-in and the user's) are
the only ones registered, the one in `settings.ui.theme` is applied at start,
and any later change of `App.theme` is saved to the config file.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.command import CommandPalette, DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape

from chat import paths
from chat.config import ModelSettings, Settings, update_config
from chat.engine.base import Engine
from chat.errors import KvchatError
from chat.models import ModelCandidate, how_to_get_a_model
from chat.store import CorruptDatabaseError, NewerSchemaError, Store, StoreError, move_aside
from chat.themes import (
    DEFAULT_THEME,
    KvchatTheme,
    ThemeProblem,
    app_variable_defaults,
    load_themes,
    unknown_theme_message,
)
from chat.ui.messages import ModelLoaded, ModelLoadFailed
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.dialogs import StorageProblemScreen

EngineFactory = Callable[[Path, ModelSettings], Engine]


def load_llama(path: Path, settings: ModelSettings) -> Engine:
    # Imported here so that the UI starts drawing before llama.cpp is imported.
    from chat.engine.llama import load_engine

    return load_engine(path, settings, paths.log_file())


def theme_problem_notices(problems: Sequence[ThemeProblem], most: int = 3) -> list[str]:
    """One notice per bad theme file: the file, then up to `most` of its problems."""
    by_file: dict[Path, list[str]] = {}
    for problem in problems:
        by_file.setdefault(problem.path, []).append(problem.detail)
    notices = []
    for path, details in by_file.items():
        lines = [f"{path}:", *details[:most]]
        if len(details) > most:
            lines.append(f"… and {len(details) - most} more (`chat --list-themes` lists them).")
        notices.append("\n".join(lines))
    return notices


class ThemeCommands(Provider):
    """The command palette's theme list: kvchat's themes in their own order
    (the default first, user themes last), each with its description."""

    def _commands(self) -> list[tuple[str, str, Callable[[], None]]]:
        app = self.app
        assert isinstance(app, ChatApp)
        commands: list[tuple[str, str, Callable[[], None]]] = []
        for theme in app.available_themes.values():
            mode = "dark" if theme.dark else "light"
            description = theme.description if isinstance(theme, KvchatTheme) else ""
            help_text = f"{mode} · {description}" if description else mode
            if theme.name == app.theme:
                help_text += " · in use"
            help_text = escape(help_text)  # the palette reads help as markup
            commands.append((theme.name, help_text, partial(app.set_theme, theme.name)))
        return commands

    async def discover(self) -> Hits:
        for name, help_text, command in self._commands():
            yield DiscoveryHit(name, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, command in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), command, help=help_text)


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
        config_path: Path | None = None,
        database: Path | None = None,
        resume: int | None = None,
    ) -> None:
        """`config_path`: where a theme chosen in the app is saved; None saves nothing.
        `database`: the conversation database (default: paths.database_file());
        `resume`: the id of a saved conversation to open at start."""
        super().__init__()
        self.settings = settings
        self.model = model
        self.engine: Engine | None = None
        self._engine_factory = engine_factory
        self._model_error = model_error
        self._startup_problems = list(startup_problems)
        self._config_path = config_path
        self._theme_problems: list[ThemeProblem] = []
        self.chat_screen = ChatScreen(settings)
        self.database = database if database is not None else paths.database_file()
        self.store: Store | None = None
        self._resume = resume
        self._use_kvchat_themes(settings.ui.theme)

    # -- themes -------------------------------------------------------------

    def _use_kvchat_themes(self, wanted: str) -> None:
        """Register kvchat's themes in place of Textual's, then apply `wanted`."""
        themes, problems = load_themes()
        # Textual's own themes set none of kvchat's variables: a light one would
        # show kvchat-dark's message blocks. Offer kvchat's themes only.
        for name in list(self.available_themes):
            self.unregister_theme(name)
        for theme in themes:
            self.register_theme(theme)
        self._theme_problems = problems
        if wanted not in self.available_themes:
            message = unknown_theme_message(wanted, self.available_themes)
            self._startup_problems.append(f"{message} Using {DEFAULT_THEME}.")
            wanted = DEFAULT_THEME
        # Not saved: watch_theme saves only once the app runs.
        self.theme = wanted

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Textual parses the CSS before any kvchat theme is registered; the
        # defaults are kvchat-dark's, read from its theme file.
        return app_variable_defaults()

    def set_theme(self, name: str) -> None:
        """Apply a registered theme and save the choice (see `watch_theme`).

        Raises `KvchatError` for a name that is not registered.
        """
        if name not in self.available_themes:
            raise KvchatError(unknown_theme_message(name, self.available_themes))
        self.theme = name

    def search_themes(self) -> None:
        # Textual's "Theme" command: the same palette, with kvchat's own list.
        self.push_screen(
            CommandPalette(providers=[ThemeCommands], placeholder="Search for themes…")
        )

    def watch_theme(self, name: str) -> None:
        """Save every change of theme, whatever made it (palette, settings, code)."""
        if not self.is_running:
            return  # the theme applied at start: from the config, env or --theme
        self.settings.ui.theme = name
        if self._config_path is None:
            return
        try:
            backup = update_config(self._config_path, "ui.theme", name)
        except KvchatError as error:
            self.notify(str(error), title="Theme not saved", severity="error", markup=False)
            return
        if backup is not None:
            self.notify(
                f"The config file had problems; its previous version is kept as {backup}.",
                severity="warning",
                timeout=15,
                markup=False,
            )

    def get_default_screen(self) -> ChatScreen:
        return self.chat_screen

    def on_mount(self) -> None:
        # Start once the chat screen is on screen: the first frame never waits
        # for llama.cpp to be imported or the model to load.
        self.call_after_refresh(self._start)

    async def _start(self) -> None:
        await self._open_store()
        for problem in self._startup_problems:
            # Not markup: problems quote the user's text, and "[model]" is a section.
            self.notify(problem, severity="warning", timeout=15, markup=False)
        for text in theme_problem_notices(self._theme_problems):
            self.notify(
                text, title="Theme file skipped", severity="warning", timeout=15, markup=False
            )
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
        if self._exit or not self.chat_screen.is_attached:
            # The user quit while the model was loading.
            message.engine.close()
            return
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
            self.notify(str(error), title="Not saving", severity="error", timeout=15, markup=False)
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
                self.notify(
                    str(error), title="Not saving", severity="error", timeout=15, markup=False
                )
                return
            self.notify(
                f"The old database is kept as {moved}. New conversations are saved in "
                f"{self.database}.",
                title="Started a new database",
                timeout=15,
                markup=False,
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
        self.notify(f"Loading {path.name}…", title="Switching models", markup=False)
        try:
            engine = await _in_daemon_thread(self._engine_factory, path, self.settings.model)
        except KvchatError as error:
            self.notify(
                str(error), title="Model not switched", severity="error", timeout=15, markup=False
            )
            return
        except Exception as error:  # llama.cpp failures we did not foresee
            self.notify(
                f"Could not load the model {path}: {error}",
                title="Model not switched",
                severity="error",
                timeout=15,
                markup=False,
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
        self.notify(f"Now using {engine.info.name}.", title="Model switched", markup=False)


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
