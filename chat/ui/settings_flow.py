"""The settings pane (F2) from opening it to what its values change, and
model switches (the same reload as a model change in the pane).

What a change does:
- sampling settings are read by the chat session at the start of each reply,
  so the next reply uses them; the tool loop's (`tools.max_steps`,
  `tools.result_token_limit`) go to the conversation's tools, which the next
  turn with tools reads (a turn under way keeps those it started with);
- the system prompt goes to new conversations, and to the current one only if
  it has no messages yet: a conversation under way keeps the prompt its
  replies were made with (regenerating stays reproducible, and its KV cache
  stays valid);
- model settings that change what is loaded reload the model; a reply still
  streaming is stopped first (one engine call at a time);
- Save writes the config file, less what was set for this run only
  (chat.settings.run_overrides).
"""

from __future__ import annotations

import copy
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App

from chat.errors import ConfigError, ModelError
from chat.models.table import model_choices
from chat.runtime.background import in_thread
from chat.runtime.model_loader import (
    ModelBusyError,
    ModelLoader,
    NoModelFoundError,
    Reload,
)
from chat.sanitize import sanitize_line
from chat.session.server_choice import server_config
from chat.session.thinking_controls import local_thinking_notes
from chat.session.tool_loop import ToolLoopSettings
from chat.session.turn import Turn
from chat.settings.config_file import backup_path, save_config
from chat.settings.run_overrides import RunOverrides
from chat.settings.schema import (
    SERVER_KINDS,
    ModelSettings,
    SamplingSettings,
    ServerSettings,
    Settings,
)
from chat.settings.server import ServerConfig, public_url
from chat.settings.values import format_value
from chat.ui.screens.chat import ChatScreen
from chat.ui.terminal_scroll import ScrollingCompositor
from chat.ui.widgets.message_view import AssistantMessageView

if TYPE_CHECKING:
    from chat.ui.screens.settings import SettingsResult


class SettingsFlow:
    def __init__(
        self,
        app: App[None],
        settings: Settings,
        screen: ChatScreen,
        turn: Turn,
        models: ModelLoader,
        config_path: Path | None,
        *,
        config_had_problems: bool,
        run_overrides: RunOverrides,
    ) -> None:
        """`settings`: the defaults new conversations start from, changed here in
        place. `config_path`: where Save writes (None: nowhere);
        `config_had_problems`: the first save keeps the file as config.toml.bak."""
        self._app = app
        self._settings = settings
        self._screen = screen
        self._turn = turn
        self._models = models
        self.config_path = config_path
        self.config_had_problems = config_had_problems
        self._run_overrides = run_overrides
        self._opening = False
        self._server_before: ServerSettings | None = None
        """The server settings before a switch under way, put back if it fails."""
        self._shown: Settings | None = None
        """The settings the pane opened with (the conversation's own)."""

    async def open_pane(self) -> None:
        # Imported here, like the other screens the first frame does not show:
        # startup to the first frame is a measured target (chat.bench).
        from chat.ui.screens.settings import SettingsScreen

        if self._opening or isinstance(self._app.screen, SettingsScreen):
            return
        self._opening = True
        try:
            loaded = self._models.model.path if self._models.model is not None else None
            # Looking for models walks download caches: not on the UI thread.
            models = await in_thread(
                "list-models", model_choices, loaded, self._settings.model.path
            )
            # What is in use: a reopened conversation's own sampling settings,
            # a preset's.
            self._shown = copy.deepcopy(self._screen.settings)
            pane = SettingsScreen(
                self._screen.settings,
                choices={
                    "model.path": list(models),
                    "ui.theme": [(name, name) for name in self._app.available_themes],
                },
                notes=self._notes(),
                config_path=self.config_path,
            )
            await self._app.push_screen(pane, callback=self._closed)
        finally:
            self._opening = False

    def _notes(self) -> dict[str, str]:
        """A line under a field: set for this run only, or ignored by the model
        server in use (a setting its API does not take is not sent)."""
        notes = self._run_overrides.notes()
        for key, note in self._conversation_notes().items():
            notes[key] = f"{notes[key]} {note}" if key in notes else note
        engine = self._models.engine
        ignored: frozenset[str] = getattr(engine, "ignored_settings", frozenset())
        if engine is not None:
            found = {
                f"sampling.{name}": f"Ignored by {engine.info.kind}: not sent to the server."
                for name in sorted(ignored)
            }
            # What a model loaded here cannot honour (a model that does not think).
            found |= local_thinking_notes(engine.info)
            for key, note in found.items():
                notes[key] = f"{notes[key]} {note}" if key in notes else note
        return notes

    def _conversation_notes(self) -> dict[str, str]:
        """A line under each sampling setting whose value shown is the
        conversation's own (its preset's, or saved with it), not the default."""
        own, defaults = self._screen.settings.sampling, self._settings.sampling
        preset = self._screen.preset_in_use
        whose = f"preset {sanitize_line(preset)}" if preset else "saved with it"
        return {
            f"sampling.{name}": (
                f"This conversation's value ({whose}); your default, "
                f"{sanitize_line(format_value(f'sampling.{name}', value))}, "
                "stays unless you change it here."
            )
            for name, value in changed_sampling(own, defaults).items()
        }

    async def _closed(self, result: SettingsResult | None) -> None:
        if result is not None:
            await self.apply(result.settings, save=result.save)

    async def apply(self, new: Settings, *, save: bool = False) -> None:
        """Use `new` from now on (see the module docstring); `save`: write the file too."""
        current = self._settings
        # The pane shows the conversation's sampling settings, which may be a
        # preset's or a reopened conversation's own: only what was changed in
        # it becomes a default (and is saved), the rest of the defaults stay.
        shown, self._shown = self._shown, None
        changed = changed_sampling(shown.sampling if shown else current.sampling, new.sampling)
        current.sampling = replace(current.sampling, **changed)
        prompt_changed = new.chat.system_prompt != current.chat.system_prompt
        current.chat = copy.deepcopy(new.chat)
        theme_changed = new.ui.theme != current.ui.theme
        current.ui = copy.deepcopy(new.ui)
        current.tools = copy.deepcopy(new.tools)
        if self._turn.tools is not None:
            self._turn.tools.settings = ToolLoopSettings.from_settings(current.tools)
        # Replies drawn from now on start folded or not (those shown keep theirs).
        AssistantMessageView.show_thinking = current.ui.show_thinking
        ScrollingCompositor.scrolls_terminal = current.ui.terminal_scroll
        self._screen.defaults_changed(changed)
        if prompt_changed:
            await self._system_prompt_changed()
        if theme_changed:
            self._apply_theme()
        server_changed = new.server != current.server
        if server_changed:
            self._server_before = copy.deepcopy(current.server)
            current.server = copy.deepcopy(new.server)
        try:
            server = server_config(current.server, os.environ)
        except ConfigError as error:
            self._app.notify(
                f"{error} The model settings were not applied.", severity="error", timeout=15
            )
            self.reload_failed()
            return
        reload = self._plan_reload(new.model, server)
        if reload is None and server_changed:
            self._server_before = None
        if save:
            self.save(model_pending=reload is not None)
        elif reload is None:
            self._app.notify("Settings applied for this session.")
        if reload is not None:
            self._start_reload(reload, save=save)

    async def _system_prompt_changed(self) -> None:
        screen = self._screen
        if not screen.conversation.messages and not screen.generating:
            await screen.action_new_conversation()  # shows the new system prompt
        else:
            self._app.notify(
                "The new system prompt applies to new conversations (Ctrl+N); "
                "this one keeps its own."
            )

    def _apply_theme(self) -> None:
        name = self._settings.ui.theme
        if name in self._app.available_themes:
            self._app.theme = name
        else:
            self._app.notify(f"There is no theme called {name}.", severity="warning")

    # Reloading the model.

    def switch_model(self, path: Path) -> None:
        """Load the model at `path` and use it from the next reply. For this
        session: Save in the pane keeps it."""
        new = copy.deepcopy(self._settings.model)
        new.path = str(path)
        if self._settings.server.url:
            self._server_before = copy.deepcopy(self._settings.server)
            self._settings.server.url = None  # the local model from now on
        reload = self._plan_reload(new, None)
        if reload is not None:
            self._start_reload(reload, save=False)

    def switch_server(self, url: str, kind: str, model: str | None) -> None:
        """Attach to the model server at `url` (the API key from the variable
        the settings name) and use it from the next reply. For this session."""
        new = copy.deepcopy(self._settings.server)
        new.url, new.model = url, model
        new.kind = kind if kind in SERVER_KINDS else "auto"
        try:
            server = server_config(new, os.environ)
        except ConfigError as error:
            self._app.notify(str(error), severity="error", timeout=15, markup=False)
            return
        self._server_before = copy.deepcopy(self._settings.server)
        self._settings.server = new
        reload = self._plan_reload(self._settings.model, server)
        if reload is not None:
            self._start_reload(reload, save=False)
        else:
            self._server_before = None

    def reconnect(self) -> None:
        """Connect to the model server in the settings again (it was down)."""
        try:
            server = server_config(self._settings.server, os.environ)
        except ConfigError as error:
            self._app.notify(str(error), severity="error", timeout=15, markup=False)
            return
        reload = self._plan_reload(self._settings.model, server)
        if reload is None and server is not None:
            # Each message is a request of its own: nothing to reconnect.
            self._app.notify(
                f"kvchat uses the server at {sanitize_line(public_url(server.url))} already; "
                "the next message goes to it (once it is up again, if it was down).",
                markup=False,
            )
        elif reload is None:
            self._app.notify("The local model is in use: there is no server to reconnect to.")
        else:
            self._start_reload(reload, save=False)

    def use_local_model(self) -> None:
        """Leave the model server for the local model (the palette's entry)."""
        if not self._settings.server.url:
            self._app.notify("The local model is in use already.")
            return
        self._server_before = copy.deepcopy(self._settings.server)
        self._settings.server.url = None
        reload = self._plan_reload(self._settings.model, None)
        if reload is not None:
            self._start_reload(reload, save=False)
        else:
            self._server_before = None

    def reload_failed(self) -> None:
        """A reload (or connection) failed: the server settings go back to those
        of the model still in use."""
        if self._server_before is not None:
            self._settings.server = self._server_before
            self._server_before = None

    def reload_done(self) -> None:
        self._server_before = None

    def _plan_reload(self, new: ModelSettings, server: ServerConfig | None) -> Reload | None:
        """The reload that `new` model settings need, or None (said why, where
        that is a problem; settings that need no reload are applied here)."""
        notify = self._app.notify
        try:
            reload = self._models.plan_reload(self._settings.model, new, server)
        except ModelBusyError as error:
            notify(f"{error} The other settings were applied.", severity="warning", timeout=10)
            return None
        except NoModelFoundError as error:
            notify(str(error), severity="error", timeout=15)
            return None
        except ModelError as error:
            notify(f"{error} The model settings were not applied.", severity="error", timeout=15)
            return None
        if reload is None and new != self._settings.model:
            self._settings.model = copy.deepcopy(new)  # the same file, named differently
        return reload

    def _start_reload(self, reload: Reload, *, save: bool) -> None:
        self._models.begin_reload()  # from now: a second change waits for this one
        self._app.run_worker(self._reload(reload, save), group="reload")

    async def _reload(self, reload: Reload, save: bool) -> None:
        screen = self._screen
        screen.model_status.reloading(
            reload.model.name, server=reload.model.server is not None
        )  # no new replies from here on
        if self._turn.generating:
            self._app.notify("Stopping the reply to reload the model; what it wrote is kept.")
            self._turn.stop_and_save()
            await self._turn.stopped()
        doing = "Connecting to" if reload.model.server is not None else "Reloading model"
        self._app.notify(f"{doing} {reload.model.name}…")
        self._models.reload(reload, save=save)

    # Saving.

    def save(self, *, model_pending: bool = False) -> bool:
        """Write the settings to the config file; say so. False if not written."""
        notify = self._app.notify
        if self.config_path is None:
            notify("Settings applied for this session (there is no config file to save to).")
            return False
        try:
            to_save = self._run_overrides.settings_to_save(self._settings, self.config_path)
            save_config(to_save, self.config_path, keep_backup=self.config_had_problems)
        except ConfigError as error:
            notify(str(error), title="Settings not saved", severity="error", timeout=15)
            return False
        text = f"Settings saved to {self.config_path}."
        if model_pending:
            text += " The model settings are saved once the model has loaded."
        if self.config_had_problems:
            kept = backup_path(self.config_path)
            text += f" The earlier file, which had problems, is kept as {kept}."
            self.config_had_problems = False  # a second save must not overwrite that copy
        notify(text, timeout=8)
        return True


def changed_sampling(shown: SamplingSettings, new: SamplingSettings) -> dict[str, Any]:
    """The sampling settings `new` gives another value than `shown` had."""
    return {
        field.name: getattr(new, field.name)
        for field in fields(new)
        if getattr(new, field.name) != getattr(shown, field.name)
    }
