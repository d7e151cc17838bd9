"""Enter while the model loads: the message waits in the conversation, marked so,
and is sent once the model is ready; Esc takes it back; a failed load gives it
back. Pilot on a scripted engine whose load the test holds; then the real model."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.widgets import Static

from chat.engine.protocol import Engine
from chat.errors import ModelError
from chat.models.files import ModelCandidate
from chat.runtime.model_loader import Reload, load_llama
from chat.settings.schema import ModelSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.message_view import WaitingMessage
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import MODEL, reply_on_screen, send

WAITING = "You · waiting for the model to load… Esc takes it back"


class HeldLoad:
    """An engine factory whose loads wait until the test sets `gate`; with
    `fail`, the load then fails as a broken model file would."""

    def __init__(self, engine: ScriptedEngine, *, fail: bool = False) -> None:
        self.engine = engine
        self.fail = fail
        self.gate = threading.Event()

    def __call__(self, path: Path, settings: ModelSettings) -> ScriptedEngine:
        self.gate.wait(30)
        if self.fail:
            raise ModelError(f"Could not load the model {path}: the file is cut short.")
        return self.engine


def held_app(load: HeldLoad) -> ChatApp:
    return ChatApp(Launch(Settings(), MODEL), engine_factory=load)


async def loading(app: ChatApp, pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    await wait_for(lambda: app.models.busy, pilot)
    return app.chat_screen


def box(app: ChatApp) -> PromptBox:
    return app.query_one(PromptBox)


def waiting(app: ChatApp) -> list[WaitingMessage]:
    return list(app.query(WaitingMessage))


def notified(app: ChatApp, text: str) -> bool:
    return any(text in n.message for n in app.notices)


async def test_enter_while_loading_waits_then_sends_when_ready() -> None:
    engine = ScriptedEngine(replies=[["Hi", " you"]])
    load = HeldLoad(engine)
    app = held_app(load)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        await send(pilot, "hello while loading")
        (shown,) = waiting(app)
        assert str(shown.query_one(".message-header", Static).render()) == WAITING
        assert str(shown.query_one(".message-body", Static).render()) == "hello while loading"
        assert box(app).text == ""
        assert screen.conversation.messages == [] and engine.calls == []
        load.gate.set()
        await turn_done(screen, pilot, 2)
        assert [m.content for m in screen.conversation.messages] == [
            "hello while loading",
            "Hi you",
        ]
        assert engine.calls[0][0][-1] == {"role": "user", "content": "hello while loading"}
        assert waiting(app) == [] and reply_on_screen(app) == "Hi you"


async def test_esc_takes_the_waiting_message_back() -> None:
    engine = ScriptedEngine()
    load = HeldLoad(engine)
    app = held_app(load)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        await send(pilot, "first thought")
        await pilot.press("escape")
        assert waiting(app) == [] and box(app).text == "first thought"
        # Sent again, then something new typed: Esc puts it back above the new text.
        await pilot.press("enter")
        assert len(waiting(app)) == 1 and box(app).text == ""
        box(app).insert("second thought")
        await pilot.press("escape")
        assert waiting(app) == []
        assert box(app).text == "first thought\nsecond thought"
        load.gate.set()
        await wait_for(lambda: screen.engine is not None, pilot)
        await pilot.pause()
        assert screen.conversation.messages == [] and engine.calls == []


async def test_a_failed_load_gives_the_message_back_and_says_why() -> None:
    load = HeldLoad(ScriptedEngine(), fail=True)
    app = held_app(load)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        await send(pilot, "are you there?")
        load.gate.set()
        await wait_for(lambda: notified(app, "your message was not sent: it is back"), pilot)
        # The message comes back as the turn's event is drawn, just after the notice.
        await wait_for(lambda: box(app).text == "are you there?", pilot)
        assert waiting(app) == []
        notice = screen.query_one("#notice", Static)
        assert notice.display and "the file is cut short" in str(notice.render())
        assert screen.conversation.messages == []


async def test_a_waiting_message_that_does_not_fit_goes_back_with_the_reason() -> None:
    engine = ScriptedEngine(n_ctx=40)
    load = HeldLoad(engine)
    app = held_app(load)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        long_text = " ".join(["word"] * 60)
        await send(pilot, long_text)
        assert len(waiting(app)) == 1
        load.gate.set()
        await wait_for(lambda: box(app).text == long_text, pilot)
        assert waiting(app) == []
        await wait_for(lambda: notified(app, "tokens"), pilot)  # why it does not fit
        assert screen.conversation.messages == [] and engine.calls == []


async def test_enter_with_a_message_already_waiting_keeps_the_text() -> None:
    engine = ScriptedEngine(replies=[["one"]])
    load = HeldLoad(engine)
    app = held_app(load)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        await send(pilot, "first")
        await send(pilot, "second")
        assert notified(app, "A message is already waiting")
        assert len(waiting(app)) == 1 and box(app).text == "second"
        load.gate.set()
        await turn_done(screen, pilot, 2)
        assert screen.conversation.messages[0].content == "first"
        assert box(app).text == "second"


async def test_a_new_conversation_gives_the_waiting_message_back() -> None:
    load = HeldLoad(ScriptedEngine())
    app = held_app(load)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        await send(pilot, "for the old conversation")
        await pilot.press("ctrl+n")
        await wait_for(lambda: not waiting(app), pilot)
        assert box(app).text == "for the old conversation"
        load.gate.set()
        await wait_for(lambda: screen.engine is not None, pilot)
        assert screen.conversation.messages == []


async def test_enter_during_a_reload_waits_for_the_new_model() -> None:
    old, new = ScriptedEngine(replies=[["old"]]), ScriptedEngine(replies=[["new"]])
    engines = iter([old, new])
    gate = threading.Event()

    def factory(path: Path, settings: ModelSettings) -> ScriptedEngine:
        engine = next(engines)
        if engine is new:
            gate.wait(30)
        return engine

    app = ChatApp(Launch(Settings(), MODEL), engine_factory=factory)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is old, pilot)
        app.models.reload(Reload(MODEL, ModelSettings(n_ctx=2048)))
        screen.model_status.reloading(MODEL.name)
        await send(pilot, "during the reload")
        assert len(waiting(app)) == 1
        gate.set()
        await turn_done(screen, pilot, 2)
        assert screen.engine is new and old.calls == []
        assert [m.content for m in screen.conversation.messages] == ["during the reload", "new"]


async def test_enter_with_no_model_at_all_keeps_the_text_and_says_so() -> None:
    app = ChatApp(Launch(Settings(), None))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.chat_screen.query_one("#notice").display, pilot)
        await send(pilot, "hello?")
        assert notified(app, "No model is loaded yet; your text stays in the box.")
        assert box(app).text == "hello?" and waiting(app) == []


# --- the real model ---------------------------------------------------------------------


@pytest.mark.model
async def test_real_model_answers_a_message_sent_while_it_loads(demo_model: Path) -> None:
    """Enter is pressed before the demo model has loaded (the load starts once
    the test lets it); the reply arrives once it has."""
    gate = threading.Event()

    def load_after_enter(path: Path, settings: ModelSettings) -> Engine:
        gate.wait(30)
        return load_llama(path, settings)

    settings = Settings()
    settings.sampling.temperature = 0
    settings.sampling.max_tokens = 20
    candidate = ModelCandidate(demo_model, demo_model.stat().st_size, "demo")
    app = ChatApp(Launch(settings, candidate), engine_factory=load_after_enter)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loading(app, pilot)
        await send(pilot, "Name one colour.")
        assert len(waiting(app)) == 1 and screen.conversation.messages == []
        gate.set()
        await turn_done(screen, pilot, 2, timeout=120)
        reply = screen.conversation.messages[1]
        assert reply.content.strip() and reply.stats is not None
        assert reply.stats.generated_tokens > 0 and waiting(app) == []
        assert reply_on_screen(app).strip()
