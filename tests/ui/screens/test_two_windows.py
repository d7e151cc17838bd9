"""Two windows on one conversation (issue 15, point 6): the second to save
notices that the conversation changed underneath it, says so, and offers to
reload it or to continue as a fork; turns never interleave in the database."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from chat.conversations.store import Store
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.dialogs import ConfirmScreen
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import MODEL, ready, send

SAVED_BY_BOTH = ["from this window", "first reply", "from the other window", "its reply"]
"""The conversation once each window saved its turn, this one first."""


def chat_app(database: Path, *replies: str) -> ChatApp:
    engine = ScriptedEngine(
        replies=[[reply] for reply in replies or ("first reply", "second reply")]
    )
    return ChatApp(
        Launch(Settings(), MODEL, database=database), engine_factory=scripted_factory(engine)
    )


async def another_window_adds_a_turn(database: Path, conv_id: int) -> None:
    """A second kvchat window opens the conversation and adds a turn to it."""
    other = chat_app(database, "its reply")
    async with other.run_test() as pilot:
        screen = await ready(other, pilot)
        await wait_for(lambda: other.store is not None, pilot)
        assert await screen.open_conversation(conv_id)
        await send(pilot, "from the other window")
        await turn_done(screen, pilot, 4)


async def changed_underneath(app: ChatApp, pilot: Pilot[None], database: Path) -> int:
    """A turn here, one in another window, then a message here: the dialog
    that says so is up. Returns the conversation's id."""
    screen = await ready(app, pilot)
    await wait_for(lambda: app.store is not None, pilot)
    await send(pilot, "from this window")
    await turn_done(screen, pilot, 2)
    conv_id = screen.conversation.id
    assert conv_id is not None
    await another_window_adds_a_turn(database, conv_id)
    await send(pilot, "this window again")
    await wait_for(lambda: isinstance(app.screen, ConfirmScreen), pilot)
    return conv_id


def contents(database: Path, conv_id: int) -> list[str]:
    with Store(database) as store:
        return [m.content for m in store.get_conversation(conv_id).messages]


async def test_reload_shows_the_other_windows_turn_and_keeps_the_text(tmp_path: Path) -> None:
    database = tmp_path / "c.db"
    app = chat_app(database)
    async with app.run_test() as pilot:
        conv_id = await changed_underneath(app, pilot, database)
        screen = app.chat_screen
        assert "another kvchat window" in str(app.screen.query_one(".dialog-text").render())
        await pilot.click("#no")  # Reload
        await wait_for(lambda: len(screen.conversation.messages) == 4, pilot)
        assert [m.content for m in screen.conversation.messages] == SAVED_BY_BOTH
        assert app.query_one(PromptBox).text == "this window again"
    # Nothing of this window's second turn reached the other window's conversation.
    assert contents(database, conv_id) == SAVED_BY_BOTH


async def test_continue_as_a_fork_saves_a_new_conversation(tmp_path: Path) -> None:
    database = tmp_path / "c.db"
    app = chat_app(database)
    async with app.run_test() as pilot:
        original = await changed_underneath(app, pilot, database)
        screen = app.chat_screen
        await pilot.click("#yes")  # Continue as a fork
        await turn_done(screen, pilot, 4)
        fork = screen.conversation.id
        assert fork is not None and fork != original
        assert screen.conversation.title.endswith("(fork)")
        await send(pilot, "and once more")  # the fork goes on being saved
        await turn_done(screen, pilot, 6)
    assert contents(database, original) == SAVED_BY_BOTH
    assert contents(database, fork)[:4] == [
        "from this window",
        "first reply",
        "this window again",
        "second reply",
    ]
    assert contents(database, fork)[4] == "and once more"
