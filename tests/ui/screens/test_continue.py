"""Continuing a cut reply (Ctrl+L, or the palette) on a scripted engine: the
continuation streams into the same message, which is saved whole, with no new
branch. The real model's side (only new tokens evaluated) is in
tests/engine/test_continue.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from chat.engine.protocol import ChatMessages, EngineEvent
from chat.errors import KvchatError
from chat.settings.schema import SamplingSettings
from chat.ui.app import ChatApp
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.message_view import AssistantMessageView
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, reply_on_screen, run_command, send


async def stopped_reply(app: ChatApp, engine: ScriptedEngine, pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    """Send a message and press Esc after two tokens of the reply (it ends
    within a token: three)."""
    screen = await ready(app, pilot)
    await send(pilot, "Count")
    await wait_for(engine.holding.is_set, pilot)
    await pilot.press("escape")
    await turn_done(screen, pilot, 2)
    reply = screen.conversation.messages[-1]
    assert reply.stats is not None and reply.stats.finish_reason == "stopped"
    engine.hold_after = None
    return screen


async def test_ctrl_l_continues_the_stopped_reply_in_the_same_message() -> None:
    engine = ScriptedEngine(
        replies=[["One", " two", " three", " and"], [" four", " five."]], hold_after=2
    )
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await stopped_reply(app, engine, pilot)
        reply = screen.conversation.messages[-1]
        assert reply.content == "One two three"
        reply_id = reply.id
        await pilot.press("ctrl+l")
        await wait_for(lambda: len(engine.calls) == 2 and not screen.generating, pilot)
        # The model was asked to go on with the reply, sent as it stands.
        sent, _ = engine.calls[1]
        assert engine.continued == [False, True]
        assert sent[-1]["role"] == "assistant" and sent[-1]["content"] == "One two three"
        # The same message, longer: on screen, in the conversation, in the database.
        assert screen.conversation.messages[-1] is reply
        assert reply.content == "One two three four five."
        assert reply.id == reply_id
        assert len(app.query(AssistantMessageView)) == 1
        assert "One two three four five." in reply_on_screen(app)
        assert reply.stats is not None and reply.stats.finish_reason == "done"
        assert reply.stats.generated_tokens == 5  # three, then two more
        assert len(screen.conversation.tree) == 2  # no new branch
        store = screen.saver.store
        assert store is not None and screen.conversation.id is not None
        saved = store.get_conversation(screen.conversation.id)
        assert [m.content for m in saved.messages] == ["Count", "One two three four five."]
        assert saved.messages[-1].stats is not None
        assert saved.messages[-1].stats.finish_reason == "done"


async def test_the_palette_continues_too() -> None:
    engine = ScriptedEngine(replies=[["A", " b", " c"], [" d"]], hold_after=1)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await stopped_reply(app, engine, pilot)
        await run_command(pilot, "continue", "Continue the last reply")
        await wait_for(lambda: len(engine.calls) == 2 and not screen.generating, pilot)
        assert screen.conversation.messages[-1].content == "A b d"


async def test_a_finished_reply_is_not_continued() -> None:
    engine = ScriptedEngine(replies=[["Done", "."]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "hi")
        await turn_done(screen, pilot, 2)
        await pilot.press("ctrl+l")
        await wait_for(lambda: any("cut short" in n.message for n in app.notices), pilot)
        assert not screen.generating and len(engine.calls) == 1


class NoContinueEngine(ScriptedEngine):
    """Like a model server's engine: it cannot continue a reply."""

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
        continue_last: bool = False,
    ) -> Iterator[EngineEvent]:
        if continue_last:
            raise KvchatError("A reply can be continued only with a model loaded in kvchat.")
        yield from super().stream_reply(messages, sampling, cancel, record_probs)


async def test_a_failed_continuation_keeps_the_reply() -> None:
    engine = NoContinueEngine(replies=[["One", " two", " three", " and"]], hold_after=2)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await stopped_reply(app, engine, pilot)
        reply = screen.conversation.messages[-1]
        await pilot.press("ctrl+l")
        await wait_for(lambda: any("only with a model" in n.message for n in app.notices), pilot)
        await wait_for(lambda: not screen.generating, pilot)
        assert screen.conversation.messages[-1] is reply
        assert reply.content == "One two three"
        assert "One two three" in reply_on_screen(app)
        store = screen.saver.store
        assert store is not None and screen.conversation.id is not None
        saved = store.get_conversation(screen.conversation.id)
        assert [m.content for m in saved.messages] == ["Count", "One two three"]
