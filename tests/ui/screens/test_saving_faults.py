"""Saving under real filesystem faults (issue 15, point 1): a data folder that
cannot be created, a read-only one, a disk that fills up mid-conversation.
Chatting goes on, a lasting "not saving" mark names the folder and the reason,
the reason is said once, and saving resumes by itself when the folder works
again, without touching what was saved before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Static

import chat.ui.database_flow as database_flow
from chat.conversations.store import Store
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens import conversation_flow, quit_unsaved
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.quit_unsaved import QuitUnsavedScreen
from chat.ui.terminal_input import TerminalGone
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.faults import Fault
from tests.ui.conftest import MODEL, ready, send


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database_flow, "RETRY_S", 0.2)
    monkeypatch.setattr(conversation_flow, "SAVE_RETRY_S", 0.2)


def app_saving_to(
    database: Path, engine: ScriptedEngine | None = None
) -> tuple[ChatApp, list[str]]:
    """The app with a scripted model; every notice it shows is recorded."""
    engine = engine or ScriptedEngine(replies=[[f"reply {n}"] for n in range(4)])
    app = ChatApp(
        Launch(Settings(), MODEL, database=database), engine_factory=scripted_factory(engine)
    )
    notices: list[str] = []
    notify = app.notify

    def record(message: str, **kwargs):  # type: ignore[no-untyped-def]
        notices.append(f"{kwargs.get('title', '')}: {message}")
        return notify(message, **kwargs)

    app.notify = record  # type: ignore[method-assign]
    return app, notices


def status(app: ChatApp) -> str:
    # All the bar holds: at 80 columns it draws the reply's figures first and
    # leaves the rest to F1 (tests/ui/screens/test_small_terminals.py).
    return app.query_one(StatusBar).full_text()


def saved_turns(database: Path) -> list[list[tuple[str, str]]]:
    with Store(database) as store:
        return [
            [(m.role, m.content) for m in store.get_conversation(summary.id).messages]
            for summary in store.list_conversations()
        ]


def not_saving_notices(notices: list[str]) -> list[str]:
    return [n for n in notices if n.startswith("Not saving")]


@pytest.mark.parametrize("fault_name", ["uncreatable_folder", "read_only_folder"])
async def test_a_folder_that_cannot_be_used_at_start_then_works(
    fault_name: str, request: pytest.FixtureRequest
) -> None:
    fault: Fault = request.getfixturevalue(fault_name)
    database = fault.folder / "data" / "conversations.db"
    app, notices = app_saving_to(database)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: "not saving" in status(app), pilot)
        # The mark names the folder and what is wrong with it.
        assert str(database.parent) in status(app)
        if fault.kind == "uncreatable":
            reason = f"{database.parent} cannot be created: {fault.folder.parent} is a file"
        else:
            reason = f"{database.parent} is on a read-only disk"
        assert reason in status(app)
        # Chatting works meanwhile, and the problem is said once.
        await send(pilot, "first question")
        await turn_done(screen, pilot, 2)
        await send(pilot, "second question")
        await turn_done(screen, pilot, 4)
        assert "not saving" in status(app)
        assert len(not_saving_notices(notices)) == 1, notices
        assert str(database) in not_saving_notices(notices)[0]

        fault.heal()
        await wait_for(lambda: app.store is not None, pilot, 10)
        await wait_for(lambda: "not saving" not in status(app), pilot)
        assert any(n.startswith("Saving") for n in notices)
        assert screen.conversation.id is not None
    assert saved_turns(database) == [
        [
            ("user", "first question"),
            ("assistant", "reply 0"),
            ("user", "second question"),
            ("assistant", "reply 1"),
        ]
    ]


async def test_a_disk_that_fills_up_mid_conversation(small_folder: Fault) -> None:
    if not small_folder.real:
        pytest.fail("this machine cannot mount a small tmpfs (root is needed)")
    database = small_folder.folder / "conversations.db"
    app, notices = app_saving_to(database)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await send(pilot, "saved before the disk filled")
        await turn_done(screen, pilot, 2)
        before = saved_turns(database)

        small_folder.break_again()  # the disk is full now
        await send(pilot, "asked on a full disk")
        await turn_done(screen, pilot, 4)
        await send(pilot, "asked again on a full disk")
        await turn_done(screen, pilot, 6)
        # One message with the reason; the mark stays; never "deleted elsewhere".
        assert len(not_saving_notices(notices)) == 1, notices
        assert "full" in not_saving_notices(notices)[0]
        assert not any("no longer" in n for n in notices), notices
        assert f"the disk holding {database.parent} is full" in status(app)
        # What was saved before is untouched.
        assert saved_turns(database)[0][:2] == before[0]

        small_folder.heal()
        await wait_for(lambda: "not saving" not in status(app), pilot, 10)
        assert any(n.startswith("Saving: Saving again") for n in notices), notices
    assert saved_turns(database) == [
        [
            ("user", "saved before the disk filled"),
            ("assistant", "reply 0"),
            ("user", "asked on a full disk"),
            ("assistant", "reply 1"),
            ("user", "asked again on a full disk"),
            ("assistant", "reply 2"),
        ]
    ]


async def test_a_reply_streaming_while_the_disk_fills_is_saved_when_it_frees(
    small_folder: Fault,
) -> None:
    database = small_folder.folder / "conversations.db"
    tokens = [f"{n:03d}" + "-" * 96 for n in range(60)]  # its rows outgrow a page
    engine = ScriptedEngine(replies=[tokens], delay=0.02, hold_after=10)
    app, notices = app_saving_to(database, engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await send(pilot, "count")
        await wait_for(engine.holding.is_set, pilot)
        small_folder.break_again()
        engine.release.set()
        await wait_for(lambda: not_saving_notices(notices), pilot, 10)
        await turn_done(screen, pilot, 2)
        small_folder.heal()
        await wait_for(lambda: not screen.saver.failing, pilot, 10)
        assert "not saving" not in status(app)
    assert saved_turns(database) == [[("user", "count"), ("assistant", "".join(tokens))]]


# Quitting while messages are not saved (issue 27): the dialog's three answers.


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's home folder, where "Save to a file" writes first."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setattr(quit_unsaved, "WAIT_RETRY_S", 0.2)
    return folder


async def first_turn(app: ChatApp, pilot, text: str) -> ChatScreen:  # type: ignore[no-untyped-def]
    """Once the model is ready, `text` sent and its reply ended."""
    screen = await ready(app, pilot)
    await send(pilot, text)
    await turn_done(screen, pilot, 2)
    return screen


async def quit_into_dialog(app: ChatApp, pilot) -> QuitUnsavedScreen:  # type: ignore[no-untyped-def]
    await pilot.press("ctrl+q")
    await wait_for(lambda: isinstance(app.screen, QuitUnsavedScreen), pilot)
    assert isinstance(app.screen, QuitUnsavedScreen)
    return app.screen


def dialog_text(dialog: QuitUnsavedScreen) -> str:
    return str(dialog.query_one("#problem", Static).render())


async def test_quitting_on_a_full_disk_waits_then_saves_the_cut_reply_whole(
    small_folder: Fault, home: Path
) -> None:
    """The reply was streaming when the disk filled: Ctrl+Q stops it, says the
    messages are not saved and why; Wait quits once the disk has room, with the
    reply saved whole, as stopped, not as one kvchat was killed writing."""
    if not small_folder.real:
        pytest.fail("this machine cannot mount a small tmpfs (root is needed)")
    database = small_folder.folder / "conversations.db"
    tokens = [f"{n:03d}" + "-" * 96 for n in range(400)]  # its rows outgrow a page
    engine = ScriptedEngine(replies=[tokens], delay=0.02, hold_after=10)
    app, notices = app_saving_to(database, engine)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await send(pilot, "count")
        await wait_for(engine.holding.is_set, pilot)
        small_folder.break_again()
        engine.release.set()
        await wait_for(lambda: not_saving_notices(notices), pilot, 10)
        dialog = await quit_into_dialog(app, pilot)
        streamed = app.chat_screen.conversation.messages[-1]
        assert streamed.role == "assistant"  # stopped by the quit: the reply has ended
        assert "1 message is not saved" in dialog_text(dialog)
        assert f"the disk holding {database.parent} is full" in dialog_text(dialog)
        await pilot.click("#wait")
        await wait_for(lambda: "Waiting" in dialog_text(dialog), pilot)
        assert app.return_code is None  # still waiting for room
        small_folder.heal()
        await wait_for(lambda: app.return_code is not None, pilot)
    assert app.return_code == 0
    with Store(database) as store:
        (summary,) = store.list_conversations()
        reply = store.get_conversation(summary.id).messages[-1]
    assert reply.content == streamed.content
    assert len(reply.content) > 10 * 99  # more than the part saved before the disk filled
    assert reply.state == "complete"
    assert reply.stats is not None and reply.stats.finish_reason == "stopped"
    assert not list(home.iterdir())  # nothing written elsewhere


@pytest.mark.parametrize("fault_name", ["small_folder", "read_only_folder"])
async def test_quitting_unsaved_messages_saves_them_to_a_file_it_names(
    fault_name: str, home: Path, request: pytest.FixtureRequest
) -> None:
    fault: Fault = request.getfixturevalue(fault_name)
    if not fault.real:
        pytest.fail("this machine cannot mount a small tmpfs (root is needed)")
    database = fault.folder / "conversations.db"
    app, _notices = app_saving_to(database)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        if fault.kind == "full":
            await wait_for(lambda: app.store is not None, pilot)
            await send(pilot, "saved before the disk filled")
            await turn_done(screen, pilot, 2)
            fault.break_again()
        await send(pilot, "asked while it cannot be saved")
        await turn_done(screen, pilot, 4 if fault.kind == "full" else 2)
        dialog = await quit_into_dialog(app, pilot)
        assert "2 messages are not saved" in dialog_text(dialog)
        await pilot.click("#elsewhere")
        await wait_for(lambda: app.return_code is not None, pilot)
        farewell = " ".join(str(text) for text in app._exit_renderables)
    assert app.return_code == 0
    (saved,) = home.glob("kvchat-unsaved-*.json")
    assert str(saved) in farewell and "chat --import" in farewell
    contents = [m["content"] for m in json.loads(saved.read_text(encoding="utf-8"))["messages"]]
    assert contents[-2:] == [
        "asked while it cannot be saved",
        "reply 1" if fault.kind == "full" else "reply 0",
    ]


async def test_quitting_anyway_or_going_back_to_the_chat(
    read_only_folder: Fault, home: Path
) -> None:
    database = read_only_folder.folder / "conversations.db"
    app, _notices = app_saving_to(database)
    async with app.run_test() as pilot:
        screen = await first_turn(app, pilot, "never saved")
        await quit_into_dialog(app, pilot)
        await pilot.press("escape")  # back to the chat, which goes on
        await wait_for(lambda: app.screen is screen, pilot)
        await send(pilot, "still chatting")
        await turn_done(screen, pilot, 4)
        await quit_into_dialog(app, pilot)
        await pilot.click("#quit")
        await wait_for(lambda: app.return_code is not None, pilot)
    assert app.return_code == 0
    assert not list(home.iterdir())
    assert not database.exists()


async def test_a_hang_up_with_unsaved_messages_saves_them_to_a_file_unasked(
    read_only_folder: Fault, home: Path
) -> None:
    """No one is there to answer a dialog (the terminal went away, SIGTERM)."""
    database = read_only_folder.folder / "conversations.db"
    app, _notices = app_saving_to(database)
    async with app.run_test() as pilot:
        await first_turn(app, pilot, "typed before the window closed")
        app.post_message(TerminalGone())
        await wait_for(lambda: app.return_code is not None, pilot)
        farewell = " ".join(str(text) for text in app._exit_renderables)
    assert app.return_code == 0
    (saved,) = home.glob("kvchat-unsaved-*.json")
    assert str(saved) in farewell
    contents = [m["content"] for m in json.loads(saved.read_text(encoding="utf-8"))["messages"]]
    assert contents[-2:] == ["typed before the window closed", "reply 0"]
