"""Helpers for driving the app with Pilot: a scripted model, what the screen
shows, the command palette. The waits themselves (`wait_for`, `turn_done`) and
the theme-file helpers are in tests/conftest.py: tests outside tests/ui use them too."""

from __future__ import annotations

from pathlib import Path

from textual.command import Command, CommandList, CommandPalette
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets._markdown import MarkdownBlock

from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory

MODEL = ModelCandidate(Path("/models/scripted.gguf"), 1000, "test")


def make_app(engine: ScriptedEngine, settings: Settings | None = None) -> ChatApp:
    return ChatApp(Launch(settings or Settings(), MODEL), engine_factory=scripted_factory(engine))


def rendered(markdown: Markdown) -> str:
    return "\n".join(
        block._content.plain
        for block in markdown.query(MarkdownBlock)
        if hasattr(block, "_content")
    )


def header_of(view: Widget) -> str:
    """A message view's header as drawn; "" while the view is mounted but not
    yet composed (views are composed in their own turn of the event loop)."""
    return "".join(str(header.render()) for header in view.query(".message-header").results(Static))


def reply_on_screen(app: ChatApp) -> str:
    """The text of the newest reply as the screen shows it (streaming or done)."""
    views = app.query(AssistantMessageView)
    bodies = views.last().query(".message-body").results(Markdown) if views else []
    return "".join(rendered(body) for body in bodies)  # none until composed


async def ready(app: ChatApp, pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    await wait_for(lambda: app.chat_screen.engine is not None, pilot)
    return app.chat_screen


async def send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    box = pilot.app.query_one(PromptBox)
    box.focus()
    box.insert(text)
    await pilot.press("enter")


async def run_command(pilot, search: str, command: str) -> None:  # type: ignore[no-untyped-def]
    """Open the command palette (Ctrl+P), type `search`, and press Enter once
    `command` is the first suggestion; return when the palette has closed."""
    app = pilot.app
    await pilot.press("ctrl+p")
    await wait_for(lambda: isinstance(app.screen, CommandPalette), pilot)
    palette = app.screen
    await pilot.press(*search)
    suggestions = palette.query_one(CommandList)

    def first_suggestion_is_the_command() -> bool:
        if suggestions.option_count == 0 or suggestions.highlighted != 0:
            return False
        first = suggestions.get_option_at_index(0)
        return isinstance(first, Command) and first.hit.text == command

    await wait_for(first_suggestion_is_the_command, pilot)
    await pilot.press("enter")
    await wait_for(lambda: app.screen is not palette, pilot)
