"""A message being written when kvchat quit comes back in the conversation it
was written in, at the next start or when that conversation is opened with
Ctrl+O (chat.conversations.unsent). A quit with text in conversation 4's box,
then `chat --resume 1`, put it in conversation 1's box."""

from __future__ import annotations

import re

import pytest

from chat import paths
from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.conversations.unsent import keep_unsent, kept_messages
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import MODEL, app_notices


def saved(title: str) -> int:
    with Store(paths.database_file()) as store:
        return store.create_conversation(
            Conversation(
                messages=[Message("user", "hi"), Message("assistant", "hello")], title=title
            )
        )


def app_resuming(conversation: int | None) -> ChatApp:
    launch = Launch(Settings(), MODEL)
    launch.resume = conversation
    return ChatApp(launch, engine_factory=scripted_factory(ScriptedEngine(replies=[["ok"]])))


async def started(app: ChatApp, pilot) -> None:  # type: ignore[no-untyped-def]
    await wait_for(lambda: app._typed_ahead is None, pilot)  # startup done


async def test_a_message_written_in_another_conversation_waits_for_it() -> None:
    four = saved("The fourth [b]one[/b]")
    one = saved("The first")
    keep_unsent("half a question for four", four)
    app = app_resuming(one)
    async with app.run_test() as pilot:
        await started(app, pilot)
        assert app.chat_screen.conversation.id == one
        assert app.query_one(PromptBox).text == ""
        assert any(
            "writing in \u201cThe fourth [b]one[/b]\u201d when kvchat quit is kept there" in notice
            for notice in app_notices(app)
        ), app_notices(app)
        # Ctrl+O, the fourth chosen: its message is back.
        assert await app.chat_screen.open_conversation(four)
        await pilot.pause()
        assert app.query_one(PromptBox).text == "half a question for four"
        assert "The message you were writing here when kvchat quit is back in the box." in (
            app_notices(app)
        )
    assert kept_messages() == []


async def test_a_quit_keeps_the_message_with_the_conversation_open() -> None:
    four = saved("Four")
    app = app_resuming(four)
    async with app.run_test() as pilot:
        await started(app, pilot)
        app.query_one(PromptBox).insert("not finished")
        await pilot.press("ctrl+q")
    [kept] = kept_messages()
    assert kept.conversation_id == four
    assert re.fullmatch(rf"unsent-[0-9]+-in-{four}\.txt", kept.path.name)
    assert kept.path.read_text() == "not finished"

    again = app_resuming(four)
    async with again.run_test() as pilot:
        await started(again, pilot)
        assert again.query_one(PromptBox).text == "not finished"
    assert kept_messages() == []


@pytest.mark.parametrize(
    "conversation",
    [
        999,  # deleted since
        # Past SQLite's integers (a file named by hand): it stopped kvchat at
        # the start with an OverflowError.
        99999999999999999999999999,
    ],
)
async def test_a_message_of_no_saved_conversation_comes_back_at_the_start(
    conversation: int,
) -> None:
    keep_unsent("written in no saved conversation", conversation)
    keep_unsent("waits for its own", saved("Its own"))
    app = app_resuming(None)
    async with app.run_test() as pilot:
        await started(app, pilot)
        assert app.query_one(PromptBox).text == "written in no saved conversation"
    [waiting] = kept_messages()
    assert waiting.path.read_text() == "waits for its own"
