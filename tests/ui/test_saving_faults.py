"""Saving under real filesystem faults (issue 15, point 1): a data folder that
cannot be created, a read-only one, a disk that fills up mid-conversation.
Chatting goes on, a lasting "not saving" mark names the folder and the reason,
the reason is said once, and saving resumes by itself when the folder works
again, without touching what was saved before."""

from __future__ import annotations

from pathlib import Path

import pytest

import chat.ui.database_flow as database_flow
from chat.conversations.store import Store
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.faults import Fault
from tests.ui.conftest import MODEL, ready, send


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database_flow, "RETRY_S", 0.2)
    monkeypatch.setattr(ChatScreen, "SAVE_RETRY_S", 0.2)


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
    return str(app.query_one(StatusBar).render())


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
