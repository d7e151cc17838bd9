"""Helpers for driving the app with Pilot: a scripted model, waits for
conditions (never fixed pauses), and theme files to load."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import tomli_w
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownBlock

from chat.model_files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.themes import COLOUR_FIELDS
from chat.ui.widgets.prompt_box import PromptBox
from tests.fakes import ScriptedEngine, scripted_factory

MODEL = ModelCandidate(Path("/models/scripted.gguf"), 1000, "test")


def make_app(engine: ScriptedEngine, settings: Settings | None = None) -> ChatApp:
    return ChatApp(Launch(settings or Settings(), MODEL), engine_factory=scripted_factory(engine))


async def wait_for(condition, pilot, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await pilot.pause(0.02)


async def turn_done(screen: ChatScreen, pilot, count: int, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Wait until the conversation holds `count` messages and no reply streams."""
    await wait_for(
        lambda: len(screen.conversation.messages) == count and not screen.generating,
        pilot,
        timeout,
    )


def rendered(markdown: Markdown) -> str:
    return "\n".join(
        block._content.plain
        for block in markdown.query(MarkdownBlock)
        if hasattr(block, "_content")
    )


async def ready(app: ChatApp, pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    await wait_for(lambda: app.chat_screen.engine is not None, pilot)
    return app.chat_screen


async def send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    box = pilot.app.query_one(PromptBox)
    box.focus()
    box.insert(text)
    await pilot.press("enter")


def good_document(name: str = "mine", dark: bool = True) -> dict[str, Any]:
    """A valid user theme: the required fields only, no [variables]."""
    colours = dict.fromkeys(COLOUR_FIELDS, "#334455")
    colours.update(foreground="#eeeeee", background="#101010")
    return {"name": name, "dark": dark, **colours}


def write(directory: Path, file_name: str, document: dict[str, Any] | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / file_name
    text = document if isinstance(document, str) else tomli_w.dumps(document)
    file.write_text(text, encoding="utf-8")
    return file
