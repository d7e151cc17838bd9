"""Helpers for driving the app with Pilot: a scripted model, what the screen
shows, the command palette; and the fixed scenes the screenshots and the small
terminals' tests share (a tutor's conversation, a database of saved ones). The
waits themselves (`wait_for`, `turn_done`) and the theme-file helpers are in
tests/conftest.py: tests outside tests/ui use them too."""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from textual.command import Command, CommandList, CommandPalette
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Markdown, Static, TextArea
from textual.widgets._markdown import MarkdownBlock

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.settings.server import ServerConfig
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.conversations import ConversationsScreen
from chat.ui.screens.settings import SettingsScreen
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.setting_field import SettingField
from tests.conftest import turn_done, wait_for
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


def app_notices(app: ChatApp) -> list[str]:
    """The text of every notice the app showed."""
    return [str(n.message) for n in app.notices]


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


# -- fixed scenes: a tutor's conversation, saved conversations ----------------------

TUTOR = "You are a concise Python tutor."
QUESTION = "How do I reverse a list in Python?"
REPLIES = [
    "Slicing gives a reversed **copy**; `reverse()` turns the list around in place:\n\n"
    "```python\nitems = [1, 2, 3]\nprint(items[::-1])  # [3, 2, 1]\n"
    "items.reverse()\nprint(items)        # [3, 2, 1]\n```\n",
    "`reversed(items)` is lazy: it walks the list backwards without copying it.",
]
LINK = "https://docs.python.org/3/library/stdtypes.html#mutable-sequence-types"
LINK_REPLY = f"The [list methods]({LINK}) are all in the standard library reference."

STATS = ReplyStats(40, 40, 12, 0.05, 80.0, "done", seed=7, total_s=0.2)


def as_tokens(text: str) -> list[str]:
    """Word-sized chunks, so the header counts a plausible number of tokens."""
    return re.findall(r"\s*\S+", text)


def chat_app(
    theme: str = "kvchat-dark",
    replies: Sequence[str] = REPLIES,
    *,
    database: Path | None = None,
    resume: int | None = None,
) -> ChatApp:
    settings = Settings()
    settings.ui.theme = theme
    settings.chat.system_prompt = TUTOR
    engine = ScriptedEngine(replies=[as_tokens(reply) for reply in replies])
    launch = Launch(settings, MODEL, database=database, resume=resume)
    return ChatApp(launch, engine_factory=scripted_factory(engine))


def noon_utc(date: str) -> float:
    """A fixed time the browser shows as this date in any time zone within 12 hours of UTC."""
    year, month, day = (int(part) for part in date.split("-"))
    return float(calendar.timegm((year, month, day, 12, 0, 0)))


def saved_conversation(
    title: str,
    date: str,
    turns: int,
    *,
    model_path: str = str(MODEL.path),
    model_name: str = "scripted",
) -> Conversation:
    at = noon_utc(date)
    conv = Conversation(
        system_prompt=TUTOR,
        title=title,
        created=at,
        updated=at,
        model_path=model_path,
        model_name=model_name,
    )
    for i in range(turns):
        question = title if i == 0 else f"And follow-up question {i}?"
        conv.messages.append(Message("user", question, created=at))
        conv.messages.append(Message("assistant", f"Answer **{i + 1}**.", created=at, stats=STATS))
    return conv


def save(database: Path, *conversations: Conversation) -> list[int]:
    with Store(database) as store:
        return [store.create_conversation(conv) for conv in conversations]


def browser_database(tmp_path: Path) -> Path:
    database = tmp_path / "conversations.db"
    save(
        database,
        saved_conversation("Reversing a list", "2025-03-14", 2),
        saved_conversation("Dictionaries keep insertion order", "2025-02-02", 5),
        saved_conversation("Why is my generator empty the second time?", "2024-12-24", 1),
        saved_conversation(
            "asyncio.gather or TaskGroup",
            "2024-11-05",
            12,
            model_path="/models/qwen2.5-1.5b-instruct-q4_k_m.gguf",
            model_name="qwen2.5-1.5b-instruct",
        ),
    )
    return database


async def on_top(pilot: Pilot[Any], kind: type[Screen[Any]]) -> Screen[Any]:
    """Wait until a screen of this kind is on top with its contents, then let it settle."""
    app = pilot.app
    await wait_for(lambda: isinstance(app.screen, kind) and bool(app.screen.query("*")), pilot)
    await pilot.pause()
    return app.screen


async def one_reply(pilot: Pilot[Any]) -> ChatScreen:
    """Ask the question; wait for the whole reply and the meter's last count."""
    app = pilot.app
    assert isinstance(app, ChatApp)
    screen = await ready(app, pilot)
    await send(pilot, QUESTION)
    await turn_done(screen, pilot, 2)
    # The meter recounts once typing pauses (a timer started by clearing the box):
    # before or after a fast scripted reply ends. Recounted now, either way it shows this.
    screen.refresh_meter()
    await pilot.pause()
    return screen


async def open_browser(pilot: Pilot[Any], rows: int) -> ConversationsScreen:
    assert isinstance(pilot.app, ChatApp)
    await ready(pilot.app, pilot)
    await wait_for(lambda: pilot.app.store is not None, pilot)
    await pilot.press("ctrl+o")
    browser = await on_top(pilot, ConversationsScreen)
    assert isinstance(browser, ConversationsScreen)
    table = browser.query_one(DataTable)
    await wait_for(lambda: table.row_count == rows, pilot)
    return browser


# -- the settings pane and model servers -------------------------------------------------


async def open_pane(app: ChatApp, pilot) -> SettingsScreen:  # type: ignore[no-untyped-def]
    await pilot.press("f2")
    await wait_for(lambda: isinstance(app.screen, SettingsScreen), pilot)
    await pilot.pause()
    assert isinstance(app.screen, SettingsScreen)
    return app.screen


async def set_field(pane: SettingsScreen, pilot, key: str, raw: object) -> SettingField:  # type: ignore[no-untyped-def]
    """Put `raw` in the field's widget the way the user would leave it."""
    field = pane.field(key)
    control = field.control
    if isinstance(control, TextArea):
        control.load_text(str(raw))
    else:
        control.value = raw
    await pilot.pause()
    return field


def server_app(url: str, resume: int | None = None) -> ChatApp:
    settings = Settings()
    settings.server.url = url
    settings.sampling.max_tokens = 24
    settings.sampling.seed = 3
    return ChatApp(Launch(settings, ModelCandidate.for_server(ServerConfig(url)), resume=resume))


def pages_settled(view: Widget) -> bool:
    """No page of the conversation view is being mounted or set aside."""
    return not any(worker.node is view and not worker.is_finished for worker in view.app.workers)


async def opened_and_settled(
    app: ChatApp, pilot: Pilot[Any], conversation: Conversation
) -> tuple[ChatScreen, ConversationView]:
    """Once the model is ready: `conversation` open, its first pages mounted."""
    screen = await ready(app, pilot)
    assert await screen.open_conversation(conversation)
    view = screen.query_one(ConversationView)
    await wait_for(lambda: pages_settled(view), pilot)
    await pilot.pause()
    return screen, view


async def replied(app: ChatApp, pilot, text: str) -> ChatScreen:  # type: ignore[no-untyped-def]
    """Once the model is ready: `text` sent, its reply streamed to its end and drawn."""
    screen = await ready(app, pilot)
    await send(pilot, text)
    await turn_done(screen, pilot, 2)
    await pilot.pause()
    return screen
