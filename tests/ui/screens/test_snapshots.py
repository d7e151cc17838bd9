"""Screenshots of every screen and dialog, compared with the SVGs in
`__snapshots__/` (pytest-textual-snapshot, with the Textual pinned in the
`test` extra). Each screen and dialog is taken at 80x24 (the smallest common
terminal) and 120x40; the chat screen also in both built-in themes at 100x30,
which is the README's screenshot. After a deliberate change of the UI, look at
the new pictures:

    python -m pytest tests/ui/screens/test_snapshots.py --snapshot-update
    cp "tests/ui/screens/__snapshots__/test_snapshots/test_chat_screen[kvchat-dark].svg" \
        docs/screenshot.svg

Everything on screen is fixed: the scripted engine's model name and figures,
saved conversations' times (dates long past), the paths shown (relative to a
temporary working folder), the terminal size, cursors that do not blink, no
loading indicator and no notifications.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable, Input, Markdown, TextArea

from chat.conversations.conversation import Message, ReplyStats
from chat.conversations.store import Store
from chat.settings.schema import ModelSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.dialogs import ConfirmScreen, RenameScreen, StorageProblemScreen
from chat.ui.screens.help import HelpScreen
from chat.ui.screens.link_confirm import LinkConfirmScreen
from chat.ui.screens.model_picker import ModelPickerScreen
from chat.ui.screens.settings import SettingsScreen
from chat.ui.screens.token_view import TokenViewScreen
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.message_view import AssistantMessageView, WaitingMessage
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import (
    LINK,
    LINK_REPLY,
    MODEL,
    QUESTION,
    REPLIES,
    STATS,
    TUTOR,
    as_tokens,
    browser_database,
    chat_app,
    noon_utc,
    on_top,
    one_reply,
    open_browser,
    ready,
    save,
    saved_conversation,
    send,
)

SIZE = (100, 30)
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
DIALOG_SIZES = pytest.mark.parametrize(
    "size", [(80, 24), (120, 40), (60, 20)], ids=["80x24", "120x40", "60x20"]
)
"""Dialogs also at 60x20, where they take the whole screen and stack their buttons."""
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_snapshots"
README_SCREENSHOT = Path(__file__).parents[3] / "docs" / "screenshot.svg"


async def steady(pilot: Pilot[Any]) -> None:
    """What changes on its own is stopped: cursors stop blinking (they stay
    shown where focused), notifications are dismissed; then the screen settles."""
    app = pilot.app
    for screen in app.screen_stack:
        for widget in screen.query("Input, TextArea"):
            assert isinstance(widget, Input | TextArea)
            widget.cursor_blink = False
    app.clear_notifications()
    await pilot.pause()


async def meter_caught_up(pilot: Pilot[Any]) -> None:
    """The meter is planned in a thread as the draft changes: wait until it
    shows the plan of what the prompt box holds."""
    assert isinstance(pilot.app, ChatApp)
    screen = pilot.app.chat_screen
    meter = pilot.app.query_one(ContextMeter)
    draft = pilot.app.query_one(PromptBox).text
    await wait_for(
        lambda: (
            (plan := screen.turn.plan(draft)) is not None  # an edit: what it sends
            and meter.state == MeterState.from_plan(plan)
        ),
        pilot,
    )


# -- the chat screen --------------------------------------------------------------


async def hold_a_conversation(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, ChatApp)
    screen = await ready(app, pilot)
    for number, question in enumerate([QUESTION, "And without copying it?"], start=1):
        await send(pilot, question)
        await turn_done(screen, pilot, 2 * number)
    screen.refresh_meter()  # see one_reply
    app.set_focus(None)  # no cursor in the prompt box
    await pilot.pause()


@pytest.mark.parametrize("theme", ["kvchat-dark", "kvchat-light"])
def test_chat_screen(theme: str, snap_compare: Any) -> None:
    assert snap_compare(chat_app(theme), terminal_size=SIZE, run_before=hold_a_conversation)


def test_readme_screenshot_is_the_dark_snapshot() -> None:
    snapshot = SNAPSHOTS / "test_chat_screen[kvchat-dark].svg"
    assert README_SCREENSHOT.read_text(encoding="utf-8") == snapshot.read_text(encoding="utf-8"), (
        f"docs/screenshot.svg is out of date: cp '{snapshot}' {README_SCREENSHOT}"
    )


@SIZES
def test_chat_reply(size: tuple[int, int], snap_compare: Any) -> None:
    """A streamed Markdown reply with a code block, the prompt box focused."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await one_reply(pilot)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


# -- the settings pane, the token view ----------------------------------------------


@DIALOG_SIZES
def test_settings_pane(
    size: tuple[int, int], snap_compare: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model list would name the GGUF files of this machine's download caches.
    monkeypatch.setattr("chat.models.files.list_models", lambda config_model=None: [])
    monkeypatch.setattr("chat.models.table.find_models", lambda roots=None: [])

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(pilot.app, ChatApp)
        await ready(pilot.app, pilot)
        await pilot.press("f2")
        await on_top(pilot, SettingsScreen)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


@SIZES
def test_token_view(size: tuple[int, int], snap_compare: Any) -> None:
    """Ctrl+T over a reply whose token probabilities were recorded (the scripted
    engine's made-up distributions: see `scripted_choice`)."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await one_reply(pilot)
        await pilot.press("ctrl+t")
        view = await on_top(pilot, TokenViewScreen)
        assert isinstance(view, TokenViewScreen) and view.choices
        await steady(pilot)

    assert snap_compare(chat_app(replies=REPLIES[1:]), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (60, 20)], ids=["80x24", "60x20"])
def test_help_screen(size: tuple[int, int], snap_compare: Any) -> None:
    """F1 after a reply: what the status bar and the meter leave out, then every key."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await one_reply(pilot)
        await pilot.press("f1")
        await on_top(pilot, HelpScreen)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


# -- saved conversations: the browser and its dialogs ---------------------------------


@DIALOG_SIZES
def test_conversation_browser(size: tuple[int, int], snap_compare: Any, tmp_path: Path) -> None:
    """Ctrl+O over four saved conversations, newest first."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await open_browser(pilot, rows=4)
        await steady(pilot)

    app = chat_app(database=browser_database(tmp_path))
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def browser_dialog(
    key: str, dialog: type[Screen[Any]], tmp_path: Path
) -> tuple[ChatApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    """The app over four saved conversations, and what opens `dialog` from the
    browser by `key` (for `snap_compare`)."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await open_browser(pilot, rows=4)
        await pilot.press(key)
        await on_top(pilot, dialog)
        await steady(pilot)

    return chat_app(database=browser_database(tmp_path)), run_before


@DIALOG_SIZES
def test_delete_confirm(size: tuple[int, int], snap_compare: Any, tmp_path: Path) -> None:
    """D in the browser: the confirmation before the newest conversation is deleted."""

    app, run_before = browser_dialog("d", ConfirmScreen, tmp_path)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@DIALOG_SIZES
def test_rename_dialog(size: tuple[int, int], snap_compare: Any, tmp_path: Path) -> None:
    """R in the browser: the newest conversation's title, selected, ready to retype."""

    app, run_before = browser_dialog("r", RenameScreen, tmp_path)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@DIALOG_SIZES
def test_model_switch_confirm(
    size: tuple[int, int], snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation made with another model, resumed at start: switch models?"""
    monkeypatch.chdir(tmp_path)  # the other model's path, as shown, is relative
    other = Path("models") / "smollm2-360m-instruct-q8_0.gguf"
    other.parent.mkdir()
    other.write_bytes(b"GGUF" + bytes(20))  # a header, no model
    conv = saved_conversation(
        QUESTION, "2025-03-14", 1, model_path=str(other), model_name="SmolLM2 360M Instruct"
    )
    database = tmp_path / "conversations.db"
    (conv_id,) = save(database, conv)

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(pilot.app, ChatApp)
        await ready(pilot.app, pilot)
        await on_top(pilot, ConfirmScreen)
        await steady(pilot)

    app = chat_app(database=database, resume=conv_id)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


# -- the database kvchat cannot use; a link in a reply ---------------------------------


@DIALOG_SIZES
def test_storage_problem_dialog(
    size: tuple[int, int], snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged database at start: move it aside, continue without saving, or quit."""
    monkeypatch.chdir(tmp_path)  # the database's path, as shown, is relative
    database = Path("data") / "conversations.db"
    database.parent.mkdir()
    database.write_bytes(b"this is not a database, but it is someone's file\n" * 50)

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(pilot.app, ChatApp)
        await ready(pilot.app, pilot)
        await on_top(pilot, StorageProblemScreen)
        await steady(pilot)

    assert snap_compare(chat_app(database=database), terminal_size=size, run_before=run_before)


@DIALOG_SIZES
def test_link_confirm(size: tuple[int, int], snap_compare: Any) -> None:
    """A link clicked in a reply: open, copy or cancel."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await one_reply(pilot)
        body = pilot.app.query(AssistantMessageView).last().body
        body.post_message(Markdown.LinkClicked(body, LINK))
        await on_top(pilot, LinkConfirmScreen)
        await steady(pilot)

    assert snap_compare(chat_app(replies=[LINK_REPLY]), terminal_size=size, run_before=run_before)


# -- a message waiting for the model; a reply cut off by a kill ----------------------


def test_message_waiting_for_the_model(snap_compare: Any) -> None:
    """Enter while the model loads: the message waits, marked so (the loading
    indicator, which moves, is hidden)."""
    gate = threading.Event()
    engine = ScriptedEngine()

    def held_load(path: Path, settings: ModelSettings) -> ScriptedEngine:
        gate.wait(30)
        return engine

    settings = Settings()
    settings.chat.system_prompt = TUTOR
    app = ChatApp(Launch(settings, MODEL), engine_factory=held_load)

    async def run_before(pilot: Pilot[Any]) -> None:
        await wait_for(lambda: app.models.busy and bool(app.query("#loading")), pilot)
        await send(pilot, QUESTION)
        await wait_for(lambda: bool(app.query(WaitingMessage)), pilot)
        app.query_one("#loading").display = False
        await steady(pilot)

    try:
        assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
    finally:
        gate.set()


def test_interrupted_reply(snap_compare: Any, tmp_path: Path) -> None:
    """A conversation whose last reply was cut off when kvchat died, reopened."""
    conv = saved_conversation(QUESTION, "2025-03-14", 1)
    conv.messages.append(Message("user", "And without copying it?", created=noon_utc("2025-03-14")))
    conv.messages.append(
        Message(
            "assistant",
            "`reversed(items)` walks the list",
            created=noon_utc("2025-03-14"),
            state="interrupted",
        )
    )
    database = tmp_path / "conversations.db"
    (conv_id,) = save(database, conv)

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(pilot.app, ChatApp)
        screen = await ready(pilot.app, pilot)
        await wait_for(lambda: screen.conversation.id == conv_id, pilot)
        await steady(pilot)

    app = chat_app(database=database, resume=conv_id)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


# -- branches: alternatives of a message, editing ------------------------------------


@SIZES
def test_branch_switch_and_edit_banner(
    size: tuple[int, int], snap_compare: Any, tmp_path: Path
) -> None:
    """A conversation whose reply was regenerated, reopened: the reply shows
    `‹ 2/2 ›`, the first reply is selected and shown, and the user's message is
    being edited in the prompt box (the banner above it)."""
    conv = saved_conversation(QUESTION, "2025-03-14", 1)
    conv.link_shown()  # saved_conversation appends to the branch shown directly
    first = conv.messages[-1]
    conv.add_sibling(
        first,
        Message("assistant", "Use `items[::-1]`.", created=noon_utc("2025-03-14"), stats=STATS),
    )
    database = tmp_path / "conversations.db"
    (conv_id,) = save(database, conv)

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(pilot.app, ChatApp)
        screen = await ready(pilot.app, pilot)
        await wait_for(lambda: screen.conversation.id == conv_id, pilot)
        await pilot.press("alt+left")
        await wait_for(lambda: screen.conversation.messages[-1].content == first.content, pilot)
        await pilot.press("alt+up", "alt+up", "f3")
        await meter_caught_up(pilot)
        await steady(pilot)

    app = chat_app(database=database, resume=conv_id)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


# -- saving: a folder that cannot be written, another window -----------------------


def test_not_saving_mark(
    snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data folder cannot be created: the status bar keeps the reason."""
    monkeypatch.chdir(tmp_path)  # the folder's path, as shown, is relative
    Path("blocked").write_text("a file where the data folder should be\n")
    database = Path("blocked") / "data" / "conversations.db"

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ChatApp)
        screen = await one_reply(pilot)
        await wait_for(lambda: screen.saver.not_saving is not None, pilot)
        app.set_focus(None)
        await steady(pilot)

    assert snap_compare(chat_app(database=database), terminal_size=(80, 24), run_before=run_before)


@SIZES
def test_changed_in_another_window(
    size: tuple[int, int], snap_compare: Any, tmp_path: Path
) -> None:
    """Another window added a turn: reload, or continue as a fork?"""
    database = tmp_path / "conversations.db"

    async def run_before(pilot: Pilot[Any]) -> None:
        screen = await one_reply(pilot)
        conv_id = screen.conversation.id
        assert conv_id is not None
        with Store(database) as store:  # what another kvchat window writes
            conversation = store.get_conversation(conv_id)
            store.append_turn(conversation, Message("user", "Written in another window"))
        await send(pilot, "And without copying it?")
        await on_top(pilot, ConfirmScreen)
        await steady(pilot)

    assert snap_compare(chat_app(database=database), terminal_size=size, run_before=run_before)


# -- the model picker -----------------------------------------------------------------


@pytest.fixture
def model_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The picker sees the demo model and two small models in kvchat's models
    folder, and nothing of this machine's own stores; the free memory it
    compares with is fixed."""
    import chat.models.table
    from chat import paths
    from tests.models.test_download import _model

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama-cache"))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setattr(chat.models.table, "available_ram", lambda: 16 * 1024**3)
    models = paths.models_dir()
    models.mkdir(parents=True)
    (models / "tiny-Q4_K_M.gguf").write_bytes(_model(300_000, 1))
    (models / "tiny-Q8_0.gguf").write_bytes(_model(200_000, 2))


@DIALOG_SIZES
@pytest.mark.usefixtures("model_stores")
def test_model_picker(size: tuple[int, int], snap_compare: Any) -> None:
    """F8: every model found, what it needs in memory and where it was found."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ChatApp)
        await ready(app, pilot)
        await pilot.press("f8")
        picker = await on_top(pilot, ModelPickerScreen)
        table = picker.query_one(DataTable)
        await wait_for(lambda: table.row_count == 3, pilot, timeout=20)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


# -- presets ------------------------------------------------------------------------


def test_preset_in_the_status_bar(snap_compare: Any) -> None:
    """The coder preset chosen: its system prompt on top, its name in the status bar."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ChatApp)
        screen = await ready(app, pilot)
        await screen.use_preset("coder")
        await one_reply(pilot)
        app.set_focus(None)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=(80, 24), run_before=run_before)


def test_preset_picker(snap_compare: Any) -> None:
    """F9: the presets, each with what it is and what it changes."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ChatApp)
        await ready(app, pilot)
        await pilot.press("f9")
        palette = await on_top(pilot, CommandPalette)
        listed = palette.query_one(CommandList)
        await wait_for(lambda: listed.option_count == 4, pilot)
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=(80, 24), run_before=run_before)


def test_attachment_strip(
    snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files attached: a sent message's names (📎), the strip above the prompt
    box with each file's tokens, and `@no` listing what Tab completes it to."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("Lists: slicing copies, reverse() works in place.\n")
    (tmp_path / "notebook.md").write_text("# Notebook\n")
    (tmp_path / "plan.md").write_text("1. Read the docs\n2. Try it\n")

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ChatApp)
        screen = await ready(app, pilot)
        await send(pilot, "Check my notes @notes.txt")
        await turn_done(screen, pilot, 2)
        screen.draft.pick("plan.md")
        box = app.query_one(TextArea)
        box.focus()
        await pilot.press(*"And @no")
        await wait_for(lambda: bool(app.query("AttachmentChip")), pilot)
        screen.refresh_meter()
        await pilot.pause()
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=SIZE, run_before=run_before)


# -- find in the conversation -------------------------------------------------------


@SIZES
def test_find_bar(size: tuple[int, int], snap_compare: Any) -> None:
    """Ctrl+F, "list": every match highlighted in the question and both replies
    (the code block too), the newest current, the counter, the keys."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ChatApp)
        await hold_a_conversation(pilot)
        await pilot.press("ctrl+f", *"list")
        await wait_for(lambda: app.chat_screen.query(".find-highlighted"), pilot)
        await pilot.press("enter")  # the one before the newest
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=size, run_before=run_before)


# -- prompt progress ------------------------------------------------------------------


def test_prompt_progress(snap_compare: Any) -> None:
    """A message whose prompt is being read, half of it done: the status bar
    counts the tokens read, the rate and the time left."""
    settings = Settings()
    settings.chat.system_prompt = TUTOR
    engine = ScriptedEngine(replies=[as_tokens(REPLIES[0])], prompt_batches=4, prompt_hold_after=2)
    app = ChatApp(Launch(settings, MODEL), engine_factory=scripted_factory(engine))

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app, pilot)
        await send(pilot, QUESTION)
        await wait_for(engine.holding.is_set, pilot)
        status = app.chat_screen.query_one("#status")
        await wait_for(lambda: "Reading prompt" in str(status.render()), pilot)
        app.set_focus(None)
        await steady(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


# -- a reasoning model's thinking -----------------------------------------------------

THOUGHT = (
    "The user wants a reversed list. Slicing makes a copy; reverse() works in place. "
    "Mention both, and say which one changes the list."
)
THINKING_STATS = ReplyStats(
    40, 40, 52, 0.05, 80.0, "done", seed=7, total_s=0.7, thinking_tokens=31, first_answer_s=0.45
)


@SIZES
@pytest.mark.parametrize("unfolded", [False, True], ids=["folded", "unfolded"])
def test_thinking_block(
    size: tuple[int, int], unfolded: bool, snap_compare: Any, tmp_path: Path
) -> None:
    """A reasoning model's reply, reopened: its thinking folded to one line
    above the answer (count and time), and unfolded (alt+t)."""
    conv = saved_conversation(QUESTION, "2025-03-14", 1)
    reply = conv.messages[-1]
    reply.content, reply.thinking, reply.stats = REPLIES[1], THOUGHT, THINKING_STATS
    database = tmp_path / "conversations.db"
    (conv_id,) = save(database, conv)

    async def run_before(pilot: Pilot[Any]) -> None:
        assert isinstance(pilot.app, ChatApp)
        await ready(pilot.app, pilot)
        await wait_for(lambda: pilot.app.query(AssistantMessageView), pilot)
        if unfolded:
            await pilot.press("alt+t")
        await steady(pilot)

    app = chat_app(database=database, resume=conv_id)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
