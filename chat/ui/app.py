"""ChatApp: loads the model in the background, hosts the chat screen, and
applies, reloads and saves settings from the settings pane.

Settings changes (see `apply_settings`):
- sampling settings are read by the chat screen at the start of each reply, so
  the next reply uses them;
- the system prompt goes to new conversations, and to the current one only if
  it has no messages yet: a conversation under way keeps the prompt its
  replies were made with (regenerating stays reproducible, and its KV cache
  stays valid);
- model settings that change what is loaded reload the model in a thread; the
  old engine is closed only after the new one loaded, and a failed load keeps
  the old one. A reply still streaming is stopped first: one engine call at a
  time;
- Save writes the config file. Values that came from a command-line flag or a
  KVCHAT_* variable are for this run only: the file keeps its own value for
  those unless the user changed them in the pane.

It also owns the colour theme: kvchat's themes (built-in and the user's) are
the only ones registered, the one in `settings.ui.theme` is applied at start,
and any later change of `App.theme` is saved to the config file.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.markup import escape
from textual.screen import Screen

from chat import paths
from chat.config import (
    FIELDS,
    ModelSettings,
    Settings,
    backup_path,
    get_value,
    load_config,
    save_config,
    set_value,
    update_config,
)
from chat.engine.base import Engine
from chat.errors import ConfigError, KvchatError, ModelError
from chat.models import ModelCandidate, how_to_get_a_model, human_size, list_models, pick_model
from chat.store import CorruptDatabaseError, NewerSchemaError, Store, StoreError, move_aside
from chat.themes import (
    DEFAULT_THEME,
    KvchatTheme,
    ThemeProblem,
    app_variable_defaults,
    load_themes,
    unknown_theme_message,
)
from chat.ui.commands import ListedCommands, PaletteEntry
from chat.ui.messages import ModelLoaded, ModelLoadFailed, ModelReloaded, ModelReloadFailed
from chat.ui.screens.chat import ChatScreen

if TYPE_CHECKING:
    from chat.ui.screens.settings import SettingsResult

EngineFactory = Callable[[Path, ModelSettings], Engine]

# Model settings the engine is loaded with: changing one of them means a reload.
LOADER_FIELDS: tuple[str, ...] = tuple(
    spec.name for spec in FIELDS.values() if spec.section == "model" and spec.name != "path"
)


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


class ThemeCommands(ListedCommands):
    """The command palette's theme list: kvchat's themes in their own order
    (the default first, user themes last), each with its description."""

    def entries(self) -> list[PaletteEntry]:
        app = self.app
        assert isinstance(app, ChatApp)
        entries: list[PaletteEntry] = []
        for theme in app.available_themes.values():
            mode = "dark" if theme.dark else "light"
            description = theme.description if isinstance(theme, KvchatTheme) else ""
            help_text = f"{mode} · {description}" if description else mode
            if theme.name == app.theme:
                help_text += " · in use"
            help_text = escape(help_text)  # the palette reads help as markup
            entries.append(PaletteEntry(theme.name, help_text, partial(app.set_theme, theme.name)))
        return entries


class ChatApp(App[None]):
    TITLE = "kvchat"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f2", "settings", "Settings"),
    ]

    def __init__(
        self,
        settings: Settings,
        model: ModelCandidate | None,
        *,
        engine_factory: EngineFactory = load_llama,
        model_error: str | None = None,
        startup_problems: Sequence[str] = (),
        config_path: Path | None = None,
        config_had_problems: bool = False,
        run_overrides: Mapping[str, str] | None = None,
        database: Path | None = None,
        resume: int | None = None,
    ) -> None:
        """`config_path`: where Save in the settings pane and theme changes write
        (None: nothing is written). `config_had_problems`: the file had problems
        when it was loaded, so the first save keeps it as `config.toml.bak`.
        `run_overrides`: settings given for this run only, each with where it came
        from ("--temperature", "KVCHAT_SEED"). `database`: the conversation
        database (default: paths.database_file()); `resume`: the id of a saved
        conversation to open at start."""
        super().__init__()
        self.settings = settings
        self.model = model
        self.engine: Engine | None = None
        self._engine_factory = engine_factory
        self._model_error = model_error
        self._startup_problems = list(startup_problems)
        self.config_path = config_path
        self.config_had_problems = config_had_problems
        self._run_overrides = dict(run_overrides or {})
        self._run_values = {
            key: copy.deepcopy(get_value(settings, key)) for key in self._run_overrides
        }
        self._model_busy = False
        """A model is loading (at start or a reload): model settings wait for it."""
        self._opening_settings = False
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
        if self.config_path is None:
            return
        try:
            backup = update_config(self.config_path, "ui.theme", name)
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

    # How long a thread may keep the GIL while another waits for it (Python's
    # default: 5 ms). The reply thread spends most of each token in llama.cpp,
    # without the GIL, and needs it back briefly between tokens; with the
    # default it waits up to 5 ms whenever the UI is drawing: on 2 cores the app
    # then decoded at 86-89 % of a bare llama-cpp-python loop, with this at
    # 97-105 % (chat.bench, "decode: full app").
    GIL_SWITCH_INTERVAL_S = 0.0001

    def on_mount(self) -> None:
        sys.setswitchinterval(self.GIL_SWITCH_INTERVAL_S)
        # Start once the chat screen is on screen: the first frame never waits
        # for llama.cpp to be imported or the model to load.
        self.call_after_refresh(self._start)

    async def _start(self) -> None:
        if not gc.isenabled():
            # The `chat` command turned the collector off for startup (see cli).
            # The first frame is drawn, and what startup built lives as long as
            # the app: frozen, later collections skip it. Then collect again.
            gc.freeze()
            gc.enable()
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
        self._model_busy = True
        threading.Thread(
            target=self._load_model,
            args=(self.model.path, self.settings.model),
            name="kvchat-load",
            daemon=True,  # Ctrl+Q must not wait for a large model to finish loading
        ).start()

    def _build_engine(self, path: Path, settings: ModelSettings) -> Engine | str:
        """Runs in a loader thread: the engine, or why it could not be loaded."""
        try:
            return self._engine_factory(path, settings)
        except KvchatError as error:
            return str(error)
        except Exception as error:  # llama.cpp failures we did not foresee
            return f"Could not load the model {path}: {error}"

    def _load_model(self, path: Path, settings: ModelSettings) -> None:
        result = self._build_engine(path, settings)
        if isinstance(result, str):
            self.post_message(ModelLoadFailed(result))
        else:
            self.post_message(ModelLoaded(result))

    async def on_model_loaded(self, message: ModelLoaded) -> None:
        self._model_busy = False
        if self._exit or not self.chat_screen.is_attached:
            # The user quit while the model was loading.
            message.engine.close()
            return
        self.engine = message.engine
        await self.chat_screen.show_model(message.engine)

    async def on_model_load_failed(self, message: ModelLoadFailed) -> None:
        self._model_busy = False
        await self.chat_screen.show_problem(message.error)

    # -- commands -------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "Settings", "Sampling, chat and model settings (F2)", self.action_settings
        )
        yield SystemCommand(
            "Pin last seed",
            "Use the last reply's seed for every reply: the same prompt then gives the same reply",
            self.action_pin_seed,
        )
        yield SystemCommand(
            "Random seed each reply",
            "Unpin the seed: each reply gets a new one",
            self.action_random_seed,
        )

    def last_seed(self) -> int | None:
        """The seed of the newest reply in the conversation, if there is one."""
        for message in reversed(self.chat_screen.conversation.messages):
            if message.role == "assistant" and message.stats and message.stats.seed is not None:
                return message.stats.seed
        return None

    def action_pin_seed(self) -> None:
        seed = self.last_seed()
        if seed is None:
            self.notify("There is no reply yet, so no seed to pin.", severity="warning")
            return
        self.settings.sampling.seed = seed
        self.notify(
            f"Seed pinned to {seed}: Ctrl+R now regenerates the same reply. "
            "Save it in Settings (F2) to keep it; clear it there for random seeds.",
            timeout=8,
        )

    def action_random_seed(self) -> None:
        self.settings.sampling.seed = None
        self.notify("Each reply now gets a new random seed.")

    # -- the settings pane ----------------------------------------------------

    async def action_settings(self) -> None:
        # Imported here, like the other screens the first frame does not show:
        # startup to the first frame is a measured target (chat.bench).
        from chat.ui.screens.settings import SettingsScreen

        if self._opening_settings or isinstance(self.screen, SettingsScreen):
            return
        self._opening_settings = True
        try:
            # Looking for models walks download caches: not on the UI thread.
            models = await asyncio.to_thread(self._model_choices)
            notes = {
                key: f"Set by {origin} for this run." for key, origin in self._run_overrides.items()
            }
            pane = SettingsScreen(
                # What is in use: a reopened conversation's own sampling settings.
                self.chat_screen.settings,
                choices={"model.path": models, "ui.theme": self._theme_choices()},
                notes=notes,
                config_path=self.config_path,
            )
            await self.push_screen(pane, callback=self._settings_closed)
        finally:
            self._opening_settings = False

    def _model_choices(self) -> list[tuple[str, object]]:
        """The model file options: automatic, the current setting, every GGUF found."""
        options: list[tuple[str, object]] = [("Find one automatically", "")]
        seen: set[Path] = set()
        loaded = _resolved(self.model.path) if self.model is not None else None
        current = self.settings.model.path
        if current:
            mark = " (loaded)" if _resolved(Path(current)) == loaded else " (current setting)"
            options.append((current + mark, current))
            seen.add(_resolved(Path(current)))
        for candidate in list_models():
            where = _resolved(candidate.path)
            if where in seen:
                continue
            seen.add(where)
            mark = " · loaded" if where == loaded else ""
            label = f"{candidate.name}  ({human_size(candidate.size)}, {candidate.source}){mark}"
            options.append((label, str(candidate.path)))
        if self.model is not None and loaded not in seen:
            options.append((f"{self.model.path} (loaded)", str(self.model.path)))
        return options

    def _theme_choices(self) -> list[tuple[str, object]]:
        return [(name, name) for name in self.available_themes]

    async def _settings_closed(self, result: SettingsResult | None) -> None:
        if result is not None:
            await self.apply_settings(result.settings, save=result.save)

    async def apply_settings(self, new: Settings, *, save: bool = False) -> None:
        """Use `new` from now on (see the module docstring); `save`: write the file too."""
        current = self.settings
        # The chat screen reads its settings per reply: usually this very object;
        # a reopened conversation has its own copy, which gets the pane's values too.
        current.sampling = copy.deepcopy(new.sampling)
        in_use = self.chat_screen.settings
        if in_use is not current:
            in_use.sampling = copy.deepcopy(new.sampling)
        prompt_changed = new.chat.system_prompt != current.chat.system_prompt
        current.chat = copy.deepcopy(new.chat)
        if prompt_changed:
            await self._system_prompt_changed()
        theme_changed = new.ui.theme != current.ui.theme
        current.ui = copy.deepcopy(new.ui)
        if in_use is not current:
            in_use.chat, in_use.ui = current.chat, current.ui
        if theme_changed:
            self._apply_theme()
        reload = self._plan_reload(new.model)
        if save:
            self.save_settings(model_pending=reload is not None)
        elif reload is None:
            self.notify("Settings applied for this session.")
        if reload is not None:
            self._model_busy = True  # from now: a second change waits for this one
            self.run_worker(self._reload(*reload, save=save), group="reload")

    async def _system_prompt_changed(self) -> None:
        screen = self.chat_screen
        if not screen.conversation.messages and not screen.generating:
            await screen.action_new_conversation()  # shows the new system prompt
        else:
            self.notify(
                "The new system prompt applies to new conversations (Ctrl+N); "
                "this one keeps its own."
            )

    def _apply_theme(self) -> None:
        name = self.settings.ui.theme
        if name in self.available_themes:
            self.theme = name
        else:
            self.notify(f"There is no theme called {name}.", severity="warning")

    # -- reloading the model ----------------------------------------------------

    def _plan_reload(self, new: ModelSettings) -> tuple[ModelCandidate, ModelSettings] | None:
        """The model file and settings to load, or None when no reload is needed
        (model settings that need none are applied here)."""
        old = self.settings.model
        if new == old:
            return None
        if self._model_busy:
            self.notify(
                "A model is still loading: change the model settings again when it is ready. "
                "The other settings were applied.",
                severity="warning",
                timeout=10,
            )
            return None
        try:
            candidate = pick_model(None, new.path)
        except ModelError as error:
            self.notify(
                f"{error} The model settings were not applied.", severity="error", timeout=15
            )
            return None
        if candidate is None:
            self.notify(how_to_get_a_model(), severity="error", timeout=15)
            return None
        same_file = self.model is not None and _resolved(candidate.path) == _resolved(
            self.model.path
        )
        same_loader = all(getattr(new, name) == getattr(old, name) for name in LOADER_FIELDS)
        if same_file and same_loader and self.engine is not None:
            self.settings.model = copy.deepcopy(new)  # the same file, named differently
            return None
        return candidate, copy.deepcopy(new)

    async def _reload(self, model: ModelCandidate, settings: ModelSettings, save: bool) -> None:
        screen = self.chat_screen
        await screen.show_reloading(model.name)  # no new replies from here on
        if screen.generating:
            self.notify("Stopping the reply to reload the model; what it wrote is kept.")
            screen.stop_generating()
            while screen.generating:
                await asyncio.sleep(0.02)
        self.notify(f"Reloading model {model.name}…")

        def load() -> None:
            result = self._build_engine(model.path, settings)
            if isinstance(result, str):
                self.post_message(ModelReloadFailed(result, save))
            else:
                self.post_message(ModelReloaded(result, model, settings, save))

        threading.Thread(target=load, name="kvchat-reload", daemon=True).start()

    async def on_model_reloaded(self, message: ModelReloaded) -> None:
        old = self.engine
        self.engine = message.engine
        self.model = message.model
        self.settings.model = message.settings
        self._model_busy = False
        await self.chat_screen.show_model(message.engine)
        if old is not None and old is not message.engine:
            # After the new one is in place; close() waits for any call still running.
            threading.Thread(target=_close_quietly, args=(old,), daemon=True).start()
        info = message.engine.info
        self.notify(f"Model loaded: {info.name}, {info.n_ctx:,} tokens of context.")
        if message.save:
            self.save_settings()

    async def on_model_reload_failed(self, message: ModelReloadFailed) -> None:
        self._model_busy = False
        if self.engine is not None:
            await self.chat_screen.show_model(self.engine)
            kept = f"Still using {self.engine.info.name}."
        else:
            await self.chat_screen.show_problem(message.error)
            kept = "No model is loaded."
        not_done = "saved" if message.save and self.config_path is not None else "applied"
        self.notify(
            f"{message.error}\n{kept} The model settings were not {not_done}.",
            title="Model reload failed",
            severity="error",
            timeout=20,
        )

    # -- saving ---------------------------------------------------------------

    def settings_to_save(self) -> Settings:
        """The settings in use, less what a flag or variable set for this run only
        (those keep the file's value unless the user changed them since)."""
        assert self.config_path is not None
        to_save = copy.deepcopy(self.settings)
        unchanged = [
            key for key, value in self._run_values.items() if get_value(self.settings, key) == value
        ]
        if unchanged:
            in_file, _ = load_config(self.config_path)
            for key in unchanged:
                set_value(to_save, key, copy.deepcopy(get_value(in_file, key)))
        return to_save

    def save_settings(self, *, model_pending: bool = False) -> bool:
        """Write the settings to the config file; say so. False if not written."""
        if self.config_path is None:
            self.notify("Settings applied for this session (there is no config file to save to).")
            return False
        try:
            save_config(
                self.settings_to_save(), self.config_path, keep_backup=self.config_had_problems
            )
        except ConfigError as error:
            self.notify(str(error), title="Settings not saved", severity="error", timeout=15)
            return False
        text = f"Settings saved to {self.config_path}."
        if model_pending:
            text += " The model settings are saved once the model has loaded."
        if self.config_had_problems:
            kept = backup_path(self.config_path)
            text += f" The earlier file, which had problems, is kept as {kept}."
            self.config_had_problems = False  # a second save must not overwrite that copy
        self.notify(text, timeout=8)
        return True

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
            from chat.ui.screens.dialogs import StorageProblemScreen

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
        """Load the model at `path` in the background and use it from the next
        reply: the same reload as a model change in the settings pane (the
        running model stays if loading fails, and is closed only once the new
        one is in place). For this session: Save in the pane keeps it."""
        new = copy.deepcopy(self.settings.model)
        new.path = str(path)
        reload = self._plan_reload(new)
        if reload is not None:
            self._model_busy = True
            self.run_worker(self._reload(*reload, save=False), group="reload")


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):
        return path


def _close_quietly(engine: Engine) -> None:
    # The engine is gone either way; the app carries on.
    with contextlib.suppress(Exception):
        engine.close()
