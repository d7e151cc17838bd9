"""ChatApp: loads the model in the background and hosts the chat screen."""

from __future__ import annotations

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
from chat.ui.messages import ModelLoaded, ModelLoadFailed
from chat.ui.screens.chat import ChatScreen

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
    ) -> None:
        super().__init__()
        self.settings = settings
        self.model = model
        self.engine: Engine | None = None
        self._engine_factory = engine_factory
        self._model_error = model_error
        self._startup_problems = list(startup_problems)
        self.chat_screen = ChatScreen(settings)

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
