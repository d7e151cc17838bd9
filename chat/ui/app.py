"""ChatApp: wires the parts together and hosts the chat screen.

What it wires: the model loader (chat.runtime.model_loader) and the turn
(chat.session.turn, the owner of sending and replies, over the conversation's
session) to the chat screen; the settings pane (chat.ui.settings_flow) to the
settings, the config file, the loader and the turn; the conversation database
(chat.ui.database_flow) and the conversation flow (chat.ui.screens.conversation_flow)
to the session's saver; quitting to the turn; and kvchat's colour themes.

Themes: kvchat's themes (built-in and the user's) are the only ones
registered, the one in `settings.ui.theme` is applied at start, and any later
change of `App.theme` is saved to the config file.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.screen import Screen

from chat import paths
from chat.conversations.store import Store
from chat.conversations.unsent import keep_unsent, take_at_start
from chat.errors import KvchatError
from chat.models.files import ModelCandidate, how_to_get_a_model
from chat.runtime.background import in_thread, start_thread
from chat.runtime.model_loader import (
    EngineFactory,
    ModelFailed,
    ModelLoader,
    ModelReady,
    Reload,
    load_llama,
)
from chat.safe_files import shown_path
from chat.sanitize import sanitize, sanitize_line
from chat.session.chat_session import ChatSession
from chat.session.resume import SAVE_WAIT_S, WRITE_WAIT_S
from chat.session.tool_loop import ToolLoopSettings
from chat.session.tool_turn import ConversationTools
from chat.session.turn import Turn
from chat.settings.config_file import update_config
from chat.settings.presets import load_presets
from chat.settings.run_overrides import RunOverrides
from chat.settings.schema import Settings
from chat.settings.user_files import FileProblem, problem_notices
from chat.settings.values import get_value
from chat.tools.config import ServerConfig as ToolServerConfig
from chat.tools.manager import ToolServers
from chat.tools.permissions import Permissions
from chat.tools.permissions import default_file as default_permissions_file
from chat.tools.status import ServerState as ToolServerState
from chat.tools.status import ServerStatus as ToolServerStatus
from chat.ui.code_highlighting import warm_up as warm_up_highlighting
from chat.ui.commands import ThemeCommands
from chat.ui.crash_report import crash_notice, write_crash_report
from chat.ui.database_flow import DatabaseFlow
from chat.ui.messages import ModelLoadFinished, SwitchModelRequested, SwitchServerRequested
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.conversation_flow import ConversationFlow
from chat.ui.screens.help import HelpScreen
from chat.ui.settings_flow import SettingsFlow
from chat.ui.terminal_input import TerminalGone, TypedText, deliver_typed_text, typing_driver
from chat.ui.terminal_scroll import ScrollingCompositor
from chat.ui.textual_fixes import install as install_textual_fixes
from chat.ui.textual_fixes import untested_textual
from chat.ui.themes import (
    DEFAULT_THEME,
    app_variable_defaults,
    load_themes,
    unknown_theme_message,
)
from chat.ui.tuning import QuietCollections, settle_startup_garbage, share_the_gil_quickly
from chat.ui.widgets.message_view import AssistantMessageView
from chat.whole_files import write_new

if TYPE_CHECKING:
    from collections.abc import Iterable

    from textual.driver import Driver


@dataclass
class Launch:
    """What the `chat` command resolved for the app to start with."""

    settings: Settings
    model: ModelCandidate | None
    """The model file to load; None: no model (`model_error` says why, if known)."""
    model_error: str | None = None
    startup_problems: Sequence[str] = ()
    """Shown as notices once the app is up (config and environment problems)."""
    config_path: Path | None = None
    """Where Save in the settings pane and theme changes write (None: nowhere)."""
    config_had_problems: bool = False
    """The file had problems when loaded: the first save keeps it as config.toml.bak."""
    run_overrides: Mapping[str, str] = field(default_factory=dict)
    """Settings given for this run only, each with where it came from."""
    database: Path | None = None
    """The conversation database (default: paths.database_file())."""
    resume: int | None = None
    """The id of a saved conversation to open at start."""
    tool_servers: Sequence[ToolServerConfig] = ()
    """The tool servers (MCP) to start in the background (chat.tools)."""


TOOL_SERVERS_CLOSE_S = 3.0
"""At quit, how long the tool servers may take to end (each is asked, then
signalled, then killed: chat.tools.connection)."""


@dataclass(frozen=True)
class Notice:
    """One notice the app showed, as shown (sanitised)."""

    title: str
    message: str
    severity: SeverityLevel


NOTICES_KEPT = 200
"""How many of the latest notices `ChatApp.notices` keeps."""

QUIT_WAIT_S = 1.0
"""From Ctrl+Q, how long a reply may take to end (one token, normally) and the
model to be free of every call, before the app leaves without waiting."""


class ChatApp(App[None]):
    TITLE = "kvchat"
    CSS_PATH = "app.tcss"
    # Classes every screen gets from the terminal's size; app.tcss fits the
    # dialogs into small terminals with them (80x24 and larger get neither).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (80, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (24, "-tall")]
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f2", "settings", "Settings"),
    ]

    def __init__(self, launch: Launch, *, engine_factory: EngineFactory = load_llama) -> None:
        install_textual_fixes()
        self.notices: list[Notice] = []
        """The latest notices shown (NOTICES_KEPT), oldest first, as shown."""
        super().__init__()
        self.launch = launch
        self.settings = launch.settings
        """The defaults new conversations start from; the settings pane changes them."""
        self.models = ModelLoader(
            lambda outcome: self.post_message(ModelLoadFinished(outcome)), engine_factory
        )
        # How a reasoning model's thinking is first shown (the settings pane may change it).
        AssistantMessageView.show_thinking = self.settings.ui.show_thinking
        ScrollingCompositor.scrolls_terminal = self.settings.ui.terminal_scroll
        presets, self._preset_problems = load_presets()
        self.conversations = ConversationFlow(self)
        self.conversations.flagged_sampling = {
            key.removeprefix("sampling."): copy.deepcopy(get_value(self.settings, key))
            for key, origin in launch.run_overrides.items()
            if key.startswith("sampling.") and origin.startswith("--")
        }
        session = ChatSession(
            self.settings,
            self.models,
            self.conversations.report_save_problem,
            self.conversations.not_saving_changed,
            self.conversations.changed_elsewhere,
        )
        self.turn = Turn(session, self.models)
        self.tool_servers = ToolServers(launch.tool_servers, on_change=self._tool_server_changed)
        """Started once the first frame is drawn; none are when none is configured."""
        permissions = Permissions.from_config(launch.tool_servers, file=default_permissions_file())
        self.turn.tools = ConversationTools(
            self.tool_servers, permissions, ToolLoopSettings.from_settings(self.settings.tools)
        )
        self.chat_screen = ChatScreen(self.turn, self.models, self.conversations, presets)
        self.conversations.show_on(self.chat_screen, self.turn)
        self.settings_flow = SettingsFlow(
            self,
            self.settings,
            self.chat_screen,
            self.turn,
            self.models,
            launch.config_path,
            config_had_problems=launch.config_had_problems,
            run_overrides=RunOverrides(launch.run_overrides, launch.settings),
        )
        self.database = launch.database if launch.database is not None else paths.database_file()
        self.store: Store | None = None
        self._startup_problems = list(launch.startup_problems)
        if permissions.problem is not None:
            self._startup_problems.append(permissions.problem)
        self._log_problem_told: str | None = None
        """The last llama.cpp log problem told (`_tell_log_problem`)."""
        self._theme_problems: list[FileProblem] = []
        self.quiet_collections = QuietCollections()
        """Python's full garbage collections, held for a quiet moment (chat.ui.tuning)."""
        self._quit_by: float | None = None
        """When quitting must be done waiting (see QUIT_WAIT_S); None: not quitting."""
        self._typed_ahead: list[events.Key | TypedText] | None = []
        """What was typed while kvchat starts, held until the model has started
        loading (see on_event); None once it has been handed over."""
        self._use_kvchat_themes(self.settings.ui.theme)

    @property
    def config_path(self) -> Path | None:
        """Where Save in the settings pane and theme changes write (None: nowhere)."""
        return self.settings_flow.config_path

    @property
    def config_had_problems(self) -> bool:
        return self.settings_flow.config_had_problems

    # Themes: kvchat's own, and every change saved.

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

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notice of the app and its screens comes here (Screen.notify
        and Widget.notify call it). Notices quote names from outside (a model's
        metadata, a file, a server, a title): they are never read as markup and
        lose escape sequences, whatever the caller asked for."""
        del markup
        notice = Notice(sanitize_line(title), sanitize(message), severity)
        self.notices = [*self.notices[-(NOTICES_KEPT - 1) :], notice]
        super().notify(
            notice.message,
            title=notice.title,
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def clear_notifications(self) -> None:
        super().clear_notifications()
        self.notices = []

    def get_default_screen(self) -> ChatScreen:
        return self.chat_screen

    # Typed text arrives in runs (chat.ui.terminal_input): a paste that comes as
    # keystrokes costs one event per run, not per character.

    def get_driver_class(self) -> type[Driver]:
        return typing_driver(super().get_driver_class())

    async def on_typed_text(self, event: TypedText) -> None:
        if not self._held_while_starting(event):
            await deliver_typed_text(self, event)

    # Typing ahead: what a user types right after `chat`, while kvchat starts,
    # is held until the model has started loading, then handed to the prompt
    # box as if typed then: Enter sends it once the model is ready. Keys typed
    # before Textual put the terminal in raw mode come as the terminal's line
    # discipline left them, Enter as a line feed (Ctrl+J, a new line in the
    # box): a held Ctrl+J is given back as the Enter it was.

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            self.quiet_collections.input_seen()
        if isinstance(event, events.Key) and self._held_while_starting(event):
            return
        await super().on_event(event)

    def _held_while_starting(self, event: events.Key | TypedText) -> bool:
        if self._typed_ahead is None:
            return False
        if self.screen_stack and self.screen_stack[-1] is not self.chat_screen:
            return False  # a dialog while starting (the database's) takes keys
        self._typed_ahead.append(event)
        return True

    async def _hand_over_typed_ahead(self) -> None:
        held, self._typed_ahead = self._typed_ahead, None
        for event in held or []:
            if isinstance(event, TypedText):
                await deliver_typed_text(self, event)
            else:
                key = events.Key("enter", "\r") if event.key == "ctrl+j" else event
                key.set_sender(self)
                await super().on_event(key)

    # The terminal went away: quit as Ctrl+Q does (the reply saved, the KV
    # cache kept), instead of running on with no screen, or dying mid-write.

    async def on_terminal_gone(self, _event: TerminalGone) -> None:
        await self._quit(ask=False)

    def _hang_up(self) -> None:
        self.post_message(TerminalGone())

    # Start: the first frame, then the database and the model.

    def on_mount(self) -> None:
        share_the_gil_quickly()
        self.quiet_collections.take_over()
        self.set_interval(
            QuietCollections.TICK_S, self._collect_when_quiet, name="quiet collections"
        )
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            # SIGTERM (a shutdown, `kill`) ends kvchat as a hang-up does: saved,
            # the terminal restored, exit status 0 as after Ctrl+Q.
            for number in (signal.SIGHUP, signal.SIGTERM):
                loop.add_signal_handler(number, self._hang_up)
        untested = untested_textual()
        if untested is not None:
            self.notify(untested, title="Untested Textual", severity="warning", timeout=15)
        # Start once the chat screen is on screen: the first frame never waits
        # for llama.cpp to be imported or the model to load.
        self.call_after_refresh(self._start)

    async def _start(self) -> None:
        self.tool_servers.start()  # in the background: nothing here waits for one
        start_thread("highlighting", warm_up_highlighting)  # before a reply needs it
        try:
            await self._open_database_and_model()
            await self._put_back_unsent()
        finally:
            await self._hand_over_typed_ahead()

    # The message being written when kvchat quit comes back with its
    # conversation (chat.conversations.unsent): a quit never loses it. At a
    # start, those of a conversation not saved (or no longer) come back too;
    # those of other saved conversations wait, and the user is told where.

    async def _put_back_unsent(self) -> None:
        if self._quit_by is not None:
            return  # quitting already: it waits for the next start
        opened = self.turn.session.conversation.id
        store = self.turn.session.saver.store

        def titles(conversations: set[int]) -> dict[int, str]:
            assert store is not None
            try:
                return store.titles(conversations)
            except KvchatError:
                return {}  # cannot tell which are saved: they come back here

        text, waiting = await in_thread(
            "unsent", take_at_start, opened, None if store is None else titles
        )
        if waiting:
            self.notify(_waiting_notice(waiting), timeout=12)
        if not text:
            return
        if self._quit_by is not None:
            # A quit came while it was read: its box was kept without it.
            with contextlib.suppress(OSError):
                keep_unsent(text, opened)
            return
        self.chat_screen.message_draft.put_back(text)
        self.notify("The message you were writing when kvchat quit is back in the box.")

    def _keep_unsent(self) -> None:
        screen = self.chat_screen
        if not screen.is_mounted:
            return
        text = screen.message_draft.unsent()
        if not text:
            return
        try:
            keep_unsent(text, self.turn.session.conversation.id)
        except OSError as error:
            # Printed once the app has left the terminal: there it is kept.
            reason = error.strerror or str(error)
            self._exit_renderables.append(
                Text(
                    f"kvchat could not keep the message you were writing ({reason}); "
                    f"here it is:\n{sanitize(text)}"
                )
            )

    async def _open_database_and_model(self) -> None:
        settle_startup_garbage()
        await DatabaseFlow(
            self, self.database, self._use_store, self.conversations.stop_saving
        ).open()
        for problem in self._startup_problems:
            # Not markup: problems quote the user's text, and "[model]" is a section.
            self.notify(problem, severity="warning", timeout=15, markup=False)
        skipped_files = (
            ("Theme file skipped", "chat --list-themes", self._theme_problems),
            ("Preset file skipped", "chat --list-presets", self._preset_problems),
        )
        for title, list_command, problems in skipped_files:
            for text in problem_notices(problems, list_command):
                self.notify(text, title=title, severity="warning", timeout=15, markup=False)
        model = self.launch.model
        if model is None:
            error = self.launch.model_error
            if error:
                await self.chat_screen.model_status.problem(f"{error}\n\n{how_to_get_a_model()}")
            else:
                await self.chat_screen.model_status.problem(how_to_get_a_model(), no_model=True)
            return
        await self.chat_screen.model_status.loading(model.name, server=model.server is not None)
        self.models.load(model, self.settings.model)

    async def _use_store(self, store: Store) -> None:
        self.store = store
        self.conversations.attach_store(store)
        if self.launch.resume is not None:
            if await self.conversations.open(self.launch.resume):
                self.conversations.apply_flags()
            self.launch.resume = None

    async def on_model_load_finished(self, message: ModelLoadFinished) -> None:
        outcome = message.outcome
        if not self.models.accept(outcome):
            return  # the user quit while it loaded
        if isinstance(outcome, ModelReady):
            await self.chat_screen.model_status.ready(outcome.engine)
            self._tell_log_problem()
            if outcome.reload:
                self.settings.model = outcome.settings
                self.settings_flow.reload_done()
                info = outcome.engine.info
                self.notify(f"Model loaded: {info.name}, {info.n_ctx:,} tokens of context.")
                if outcome.save:
                    self.settings_flow.save()
            return
        engine = self.models.engine
        if not outcome.reload or engine is None:
            await self.chat_screen.model_status.problem(outcome.error)
        else:
            await self.chat_screen.model_status.ready(engine)
        if outcome.template_failed:
            self._offer_plain_template(outcome)
        if not outcome.reload:
            return
        self.settings_flow.reload_failed()
        kept = f"Still using {engine.info.name}." if engine else "No model is loaded."
        not_done = "saved" if outcome.save and self.config_path is not None else "applied"
        self.notify(
            f"{outcome.error}\n{kept} The model settings were not {not_done}.",
            title="Model reload failed",
            severity="error",
            timeout=20,
        )

    def _tell_log_problem(self) -> None:
        """llama.cpp's log cannot be written (the model runs all the same):
        said once, in a notice, not at every load."""
        from chat.engine.llama_log import log_problem

        problem = log_problem()
        if problem is None or problem == self._log_problem_told:
            return
        self._log_problem_told = problem
        self.notify(problem, title="No llama.cpp log", severity="warning", timeout=15, markup=False)

    def _offer_plain_template(self, failed: ModelFailed) -> None:
        """The model's chat template cannot be used: plain ChatML instead, only
        if the user agrees (for this run; model.plain_template keeps it)."""
        from chat.ui.screens.dialogs import ConfirmScreen

        question = ConfirmScreen(
            "Use plain ChatML instead?",
            f"{failed.error}\n\nkvchat can format the conversation as plain ChatML "
            "instead, for this run. A model trained on another format may answer "
            "worse. (plain_template under Model in the settings does it every time.)",
            "Use plain ChatML",
        )

        async def answered(agreed: bool | None) -> None:
            if not agreed or self.models.busy:
                return
            settings = copy.deepcopy(self.settings.model)
            settings.plain_template = True
            model = failed.model
            if self.models.engine is None:
                await self.chat_screen.model_status.loading(model.name)
                self.models.load(model, settings)
            else:
                self.chat_screen.model_status.reloading(model.name)
                self.models.reload(Reload(model, settings), save=failed.save)

        self.push_screen(question, answered)

    # The settings pane.

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            # Textual's own keys panel docks over the footer and Esc does not
            # close it; kvchat's help (F1) lists every key and figure.
            if command.title != "Keys":
                yield command
        yield SystemCommand(
            "Keys and help",
            "Every key, every figure of the status bar and the meter (F1)",
            lambda: self.push_screen(HelpScreen.of(screen)),
        )
        yield SystemCommand(
            "Settings", "Sampling, chat and model settings (F2)", self.action_settings
        )
        yield SystemCommand(
            "Connect to a model server",
            "llama-server, vLLM, Ollama or another OpenAI-compatible server: "
            "its URL under Server in the settings (F2)",
            self.action_settings,
        )
        if self.settings.server.url:
            yield SystemCommand(
                "Reconnect to the model server",
                "Try the server in the settings again (after it was down)",
                self.settings_flow.reconnect,
            )
            yield SystemCommand(
                "Use the local model",
                "Leave the model server for the GGUF model on this machine",
                self.settings_flow.use_local_model,
            )

    async def action_settings(self) -> None:
        await self.settings_flow.open_pane()

    def deliver_screenshot(
        self,
        filename: str | None = None,
        path: str | None = None,
        time_format: str | None = None,
    ) -> str | None:
        """The palette's Screenshot: an SVG of the screen in the current folder
        (as Ctrl+E's export), named in a notice. Textual saves it in the
        Downloads folder and says only "Failed to save screenshot" when that
        folder is missing."""
        stamp = time.strftime(time_format or "%Y-%m-%dT%H_%M_%S")
        names = [filename] if filename else [f"kvchat {stamp}{n}.svg" for n in ("", "-2", "-3")]
        try:
            folder = Path(path) if path else paths.working_folder()
            target = write_new(folder, names, self.export_screenshot())  # the user's files stay
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            where = shown_path(path) if path else "the current folder"
            self.notify(
                f"The screenshot could not be saved in {where}: {reason}.",
                title="Screenshot",
                severity="error",
                timeout=10,
            )
            return None
        self.notify(f"Screenshot saved to {shown_path(target)}.", title="Screenshot")
        return str(target)

    def on_switch_model_requested(self, message: SwitchModelRequested) -> None:
        self.settings_flow.switch_model(message.path)

    def on_switch_server_requested(self, message: SwitchServerRequested) -> None:
        self.settings_flow.switch_server(message.url, message.kind, message.model)

    def action_help_quit(self) -> None:
        # Ctrl+C where nothing is selected to copy. Textual's own notice writes
        # its key as markup ("Press [b]ctrl+q[/b]"), and notices here are
        # never read as markup: it showed the tags.
        self.notify("Ctrl+Q quits kvchat; Esc stops a reply.", title="Do you want to quit?")

    async def action_quit(self) -> None:
        from chat.ui.screens.quit_unsaved import QuitUnsavedScreen

        if isinstance(self.screen, QuitUnsavedScreen):
            return  # the user is deciding what to do with unsaved messages
        await self._quit(ask=True)

    async def _quit(self, *, ask: bool) -> None:
        """`ask`: messages that cannot be saved make a dialog ask what to do with
        them; else (no one may be there: a hang-up, SIGTERM) they are saved to a
        file elsewhere, named on the terminal after the app ends."""
        if self._quit_by is not None:
            return  # already quitting (Ctrl+Q twice, or a hang-up during a quit)
        screen = self.chat_screen
        self._quit_by = time.monotonic() + QUIT_WAIT_S
        # The screen may be in the middle of something (sending a message and
        # starting its reply): let that finish first, or the app would remove
        # its widgets under it. A callback queued behind it runs when it is done.
        settled = asyncio.Event()
        screen.call_later(settled.set)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(settled.wait(), QUIT_WAIT_S)
        # A reply ends within a token: wait for it while the screen still runs,
        # so that it is saved whole, as stopped, with its figures.
        self.turn.stop_and_save()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.turn.stopped(), max(0.0, self._quit_by - time.monotonic()))
        if self._unsaved_messages():
            if ask:
                self._ask_about_unsaved()
                return
            self._save_elsewhere_on_exit()
        self._leave_and_exit()

    def _unsaved_messages(self) -> int:
        """Messages the database does not hold and cannot take now (0 when saving works)."""
        session = self.turn.session
        saver = session.saver
        if saver.not_saving is None:
            return 0
        session.save_all()  # one more try: the disk may have room again
        return saver.unsaved_messages(session.conversation)

    def _ask_about_unsaved(self) -> None:
        from chat.ui.screens.quit_unsaved import QuitUnsavedScreen

        self._quit_by = None  # not quitting while the user decides
        session = self.turn.session

        def saved() -> bool:
            session.save_all()
            return session.saver.unsaved_messages(session.conversation) == 0

        dialog = QuitUnsavedScreen(
            session.saver.unsaved_messages(session.conversation),
            session.saver.not_saving or "the database cannot be written",
            saved,
            self._export_elsewhere,
        )
        self.push_screen(dialog, self._unsaved_answer)

    def _unsaved_answer(self, answer: str | None) -> None:
        if answer is None:
            return  # back to the chat
        self._quit_by = time.monotonic() + QUIT_WAIT_S
        if answer.startswith("saved-elsewhere:"):
            self._say_on_exit(answer.removeprefix("saved-elsewhere:"))
        self._leave_and_exit()

    def _export_elsewhere(self) -> Path:
        from chat.conversations.transcript import export_elsewhere

        session = self.turn.session
        return export_elsewhere(session.conversation, session.conversation_settings().sampling)

    def _save_elsewhere_on_exit(self) -> None:
        try:
            path = self._export_elsewhere()
        except KvchatError as error:
            self._exit_renderables.append(Text(f"kvchat: messages not saved. {error}"))
            return
        self._say_on_exit(str(path))

    def _say_on_exit(self, path: str) -> None:
        # Printed on the terminal once the app has left it (if there still is one).
        self._exit_renderables.append(
            Text(
                f"kvchat could not save the conversation in its database; it is in "
                f"{shown_path(path)} (chat --import {shown_path(path)} brings it back)."
            )
        )

    def _tool_server_changed(self, status: ToolServerStatus) -> None:
        """A tool server that fails is named in one sentence; the chat goes on.
        The tools a reply is offered may have changed: the meter counts them."""
        if status.state is ToolServerState.FAILED and status.problem:
            self.notify(status.problem, title="Tool server", severity="warning", timeout=15)
        if self.chat_screen.is_mounted:
            self.chat_screen.tools_changed()

    async def _close_tool_servers(self) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.tool_servers.close(), TOOL_SERVERS_CLOSE_S)

    def _leave_and_exit(self) -> None:
        self._keep_unsent()
        if not self.turn.generating:
            # Its KV cache, for instant resume next time: the save may wait for
            # the work the engine does ahead of time to end its batch for as
            # long as the quit may still take.
            quit_by = self._quit_by or time.monotonic() + QUIT_WAIT_S
            self.turn.session.leave(max(SAVE_WAIT_S, quit_by - time.monotonic()))
        if self.tool_servers.servers:
            # Ended before the app: a server left running would outlive kvchat.
            self.run_worker(self._close_tool_servers_and_exit(), exit_on_error=False)
            return
        self.exit()

    async def _close_tool_servers_and_exit(self) -> None:
        try:
            await self._close_tool_servers()
        finally:
            self.exit()

    def _handle_exception(self, error: Exception) -> None:
        # Textual's handler of an exception that a message handler let out: it
        # prints a traceback and ends the app. Quitting removes the widgets even
        # under a handler still at work on a message sent just before Ctrl+Q
        # (Enter, then Ctrl+Q: the reply being mounted). Its query then finds
        # nothing; that is the quit, not a failure, and the app is ending anyway.
        if self._quit_by is not None and isinstance(error, NoMatches):
            self.log.warning(f"While quitting: {error}")
            return
        super()._handle_exception(error)

    def _fatal_error(self) -> None:
        # Textual then stops the app and prints the traceback, with locals, on
        # the terminal. The app stops all the same (its state is unknown), but
        # the traceback goes to a report file and the terminal gets a sentence
        # (chat.ui.crash_report); where no report can be written, Textual's.
        error = self._exception  # the first one, kept by Textual
        report = None if error is None else write_crash_report(error, paths.state_dir())
        if error is None or report is None:
            super()._fatal_error()
            return
        self.bell()
        self._exit_renderables.append(crash_notice(error, report))
        self._close_messages_no_wait()

    def _collect_when_quiet(self) -> None:
        screen = self.chat_screen
        self.quiet_collections.tick(busy=screen.is_attached and screen.generating)

    def on_unmount(self) -> None:
        self.quiet_collections.give_back()
        # Every screen is closed: nothing starts work on the model any more.
        # Free it once no thread uses it; one still in use when the time is up
        # is left to the end of the process (see chat.runtime.background).
        quit_by = self._quit_by or time.monotonic() + QUIT_WAIT_S
        # The KV cache was copied out when the conversation was left; its file
        # is being written (a state not written in time is only a slower resume).
        self.turn.session.resumer.wait(max(WRITE_WAIT_S, quit_by - time.monotonic()))
        self.models.close(timeout=max(0.0, quit_by - time.monotonic()))
        self.turn.close()  # a reply still running past the wait writes nothing now
        if self.store is not None:
            self.store.close()


def _waiting_notice(titles: list[str]) -> str:
    """Messages written in other conversations when kvchat quit wait there."""
    from chat.ui.widgets.token_strip import shorten  # rarely needed: not at every start

    quoted = ", ".join(f"\u201c{shorten(title, 40)}\u201d" for title in titles[:3])
    if len(titles) > 3:
        quoted += f" and {len(titles) - 3} more"
    if len(titles) == 1:
        return (
            f"The message you were writing in {quoted} when kvchat quit is kept there: "
            "it comes back when you open that conversation (Ctrl+O)."
        )
    return (
        f"The messages you were writing in {quoted} when kvchat quit are kept there: "
        "each comes back when you open its conversation (Ctrl+O)."
    )
