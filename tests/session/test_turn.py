"""The turn without Textual (chat.session.turn): what is sent, the reply's
life and its events, stopping, waiting for a model, and the work done ahead;
with the scripted engine and a real database, and with the real demo model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from chat.conversations.conversation import Message
from chat.conversations.store import Store
from chat.engine.protocol import Engine
from chat.models.files import ModelCandidate
from chat.runtime.model_loader import ModelLoader, ModelReady
from chat.session.chat_session import ChatSession
from chat.session.turn import (
    MessageWaiting,
    Refused,
    Turn,
    TurnCancelled,
    TurnEnded,
    TurnEvent,
    TurnFailed,
    TurnStarted,
    TurnText,
    WaitingOver,
)
from chat.settings.schema import ModelSettings, Settings
from tests.fakes import ScriptedEngine


def loader_of(engine: Engine | None) -> ModelLoader:
    """A model loader holding `engine`, as after a load (None: nothing loaded)."""
    loader = ModelLoader(lambda outcome: None)
    if engine is not None:
        candidate = ModelCandidate(engine.info.path, 0, "test")
        loader.accept(ModelReady(engine, candidate, ModelSettings()))
    return loader


class Recorded:
    """A turn over `engine`, saving into `store`, and the events it reported."""

    def __init__(
        self,
        engine: Engine | None,
        store: Store | None = None,
        loader: ModelLoader | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.events: list[TurnEvent] = []
        self.problems: list[str] = []
        self.loader = loader if loader is not None else loader_of(engine)
        session = ChatSession(settings or Settings(), self.loader, self.problems.append)
        if store is not None:
            session.saver.attach(store)
        self.turn = Turn(session, self.loader, self.events.append)
        self.ended = asyncio.Event()

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [event for event in self.events if isinstance(event, kind)]

    async def until(self, condition: Callable[[], object], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.01)

    def text(self) -> str:
        return "".join(event.text for event in self.of(TurnText))

    async def reply_to(self, text: str, timeout: float = 120) -> Message:
        """Send `text`; its reply, once it has ended."""
        assert self.turn.send(text) is None
        await asyncio.wait_for(self.turn.stopped(), timeout)
        reply: Message = self.of(TurnEnded)[-1].reply
        return reply


async def test_a_message_sent_streams_its_reply_as_events_and_is_saved(tmp_path: Path) -> None:
    with Store(tmp_path / "c.db") as store:
        recorded = Recorded(ScriptedEngine(replies=[["Hello", " there", "!"]]), store)
        turn = recorded.turn
        assert turn.send("Hi") is None
        assert turn.generating
        await asyncio.wait_for(turn.stopped(), 10)
        assert not turn.generating
        started = recorded.of(TurnStarted)
        assert len(started) == 1 and started[0].kind == "new"
        # The branch the view follows ends with the new message, not the reply.
        assert [m.content for m in started[0].shown] == ["Hi"]
        ended = recorded.of(TurnEnded)
        assert len(ended) == 1 and ended[0].reply.content == "Hello there!"
        assert recorded.text() == "Hello there!"
        # Started first, ended last, every event about the same reply.
        assert isinstance(recorded.events[0], TurnStarted)
        assert isinstance(recorded.events[-1], TurnEnded)
        conv_id = turn.session.conversation.id
        assert conv_id is not None
        saved = store.get_conversation(conv_id)
        assert [(m.role, m.content) for m in saved.messages] == [
            ("user", "Hi"),
            ("assistant", "Hello there!"),
        ]


async def test_nothing_is_sent_while_a_reply_streams_and_esc_stops_it() -> None:
    engine = ScriptedEngine(replies=[["slow "] * 50], hold_after=3)
    recorded = Recorded(engine)
    turn = recorded.turn
    assert turn.send("Go") is None
    await recorded.until(engine.holding.is_set)
    refused = turn.send("Another")
    assert isinstance(refused, Refused) and "still being generated" in refused.text
    assert isinstance(turn.regenerate(), Refused)
    assert turn.stop()
    await asyncio.wait_for(turn.stopped(), 10)
    (ended,) = recorded.of(TurnEnded)
    assert ended.reply.stats.finish_reason == "stopped"
    # What came is kept: the tokens up to the stall, and the one under way.
    assert ended.reply.content == "slow " * 4
    assert not turn.stop()  # nothing left to stop


async def test_what_a_reply_reports_after_the_turn_is_closed_is_dropped(tmp_path: Path) -> None:
    """On quit the app waits a moment for the reply to stop, then closes the
    turn and the database (chat.ui.app); a reply still running then (its
    prompt slow to read on a loaded machine) reports later: nothing is
    written to the closed database, nothing is drawn, nothing raises."""
    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
    engine = ScriptedEngine(replies=[["slow "] * 20], hold_after=3)
    store = Store(tmp_path / "c.db")
    recorded = Recorded(engine, store)
    turn = recorded.turn
    assert turn.send("Go") is None
    await recorded.until(engine.holding.is_set)
    drawn = len(recorded.events)
    turn.close()
    store.close()
    engine.release.set()  # the reply runs on to its end, and reports it
    await recorded.until(lambda: not engine.holding.is_set())
    await asyncio.sleep(0.3)
    assert not errors, errors
    assert len(recorded.events) == drawn


async def test_esc_while_the_prompt_is_read_keeps_no_reply() -> None:
    engine = ScriptedEngine(prompt_batches=4, prompt_hold_after=1)
    recorded = Recorded(engine)
    turn = recorded.turn
    assert turn.send("Read this") is None
    await recorded.until(engine.holding.is_set)
    turn.stop()
    await asyncio.wait_for(turn.stopped(), 10)
    (cancelled,) = recorded.of(TurnCancelled)
    assert not recorded.of(TurnEnded)
    assert [m.role for m in turn.session.conversation.messages] == ["user"]
    assert cancelled.reply not in turn.session.conversation.messages
    # Ctrl+R has no reply to regenerate, and says what answers the message.
    refused = turn.regenerate()
    assert isinstance(refused, Refused) and "Ctrl+L answers it" in refused.text
    # Ctrl+L then answers the message kept.
    engine.prompt_hold_after = None
    assert turn.continue_reply() is None
    await asyncio.wait_for(turn.stopped(), 10)
    assert recorded.of(TurnStarted)[-1].kind == "answer"
    assert [m.role for m in turn.session.conversation.messages] == ["user", "assistant"]


async def test_regenerate_keeps_the_old_reply_as_an_alternative() -> None:
    engine = ScriptedEngine(replies=[["first"], ["second"]])
    recorded = Recorded(engine)
    turn = recorded.turn
    turn.send("Hi")
    await asyncio.wait_for(turn.stopped(), 10)
    first = turn.session.conversation.messages[-1]
    assert turn.regenerate() is None
    await asyncio.wait_for(turn.stopped(), 10)
    started = recorded.of(TurnStarted)[-1]
    assert started.kind == "regenerate"
    assert [m.content for m in started.shown] == ["Hi"]  # the old reply is not shown
    second = turn.session.conversation.messages[-1]
    assert second.content == "second"
    assert turn.session.alternatives(second) == [first, second]


async def test_a_reply_cut_by_max_tokens_continues_in_the_same_message() -> None:
    engine = ScriptedEngine(replies=[["one ", "two "], ["three"]])
    settings = Settings()
    recorded = Recorded(engine, settings=settings)
    turn = recorded.turn
    turn.send("Count")
    await asyncio.wait_for(turn.stopped(), 10)
    reply = turn.session.conversation.messages[-1]
    assert reply.stats is not None
    # As if max tokens had cut it: the scripted engine ends every reply "done".
    reply.stats = replace(reply.stats, finish_reason="max_tokens")
    assert turn.continue_reply() is None
    await asyncio.wait_for(turn.stopped(), 10)
    assert recorded.of(TurnStarted)[-1].kind == "continue"
    assert engine.continued[-1] is True
    assert turn.session.conversation.messages[-1] is reply
    assert reply.content == "one two three"
    assert recorded.of(TurnEnded)[-1].continued


async def test_an_edit_is_sent_as_a_new_branch_beside_the_original() -> None:
    recorded = Recorded(ScriptedEngine(replies=[["a"], ["b"]]))
    turn = recorded.turn
    turn.send("one")
    await asyncio.wait_for(turn.stopped(), 10)
    original = turn.session.conversation.messages[0]
    assert turn.send_edit(original, "one (edited)") is None
    await asyncio.wait_for(turn.stopped(), 10)
    messages = turn.session.conversation.messages
    assert [m.content for m in messages] == ["one (edited)", "b"]
    assert turn.session.alternatives(messages[0]) == [original, messages[0]]
    assert [m.content for m in recorded.of(TurnStarted)[-1].shown] == ["one (edited)"]


async def test_a_prompt_too_long_gives_the_message_back() -> None:
    engine = ScriptedEngine(n_ctx=4096)
    recorded = Recorded(engine)
    turn = recorded.turn
    turn.send("Hi")
    await asyncio.wait_for(turn.stopped(), 10)
    # The plan fits (the window as the model said it), then the engine refuses
    # the prompt: as when a model server's window is smaller than it said.
    engine.info = replace(engine.info, n_ctx=8)
    assert turn.send("a message the engine finds too long " * 2) is None
    await asyncio.wait_for(turn.stopped(), 10)
    (failed,) = recorded.of(TurnFailed)
    assert failed.taken_back is not None
    assert failed.taken_back.content.startswith("a message the engine")
    # Out of the conversation (and the database): only the first turn is left.
    assert [m.content for m in turn.session.conversation.messages] == ["Hi", "Hello there!"]


async def test_a_message_sent_while_the_model_loads_waits_for_it() -> None:
    engine = ScriptedEngine(replies=[["Ready."]])
    release = threading.Event()

    def slow_factory(path: Path, settings: ModelSettings) -> ScriptedEngine:
        release.wait(10)
        return engine

    outcomes: list[object] = []
    loader = ModelLoader(outcomes.append, slow_factory)
    recorded = Recorded(None, loader=loader)
    turn = recorded.turn
    # Nothing loading: refused, the text stays where it is.
    refused = turn.send("too early")
    assert isinstance(refused, Refused) and "No model is loaded" in refused.text
    loader.load(ModelCandidate(engine.info.path, 0, "test"), ModelSettings())
    assert turn.send("Hello?") is None
    assert [e.text for e in recorded.of(MessageWaiting)] == ["Hello?"]
    assert turn.waiting == "Hello?"
    second = turn.send("And this?")
    assert isinstance(second, Refused) and "already waiting" in second.text
    release.set()
    await recorded.until(lambda: outcomes)
    assert loader.accept(outcomes[0])  # type: ignore[arg-type]
    assert turn.send_waiting()
    await asyncio.wait_for(turn.stopped(), 10)
    (over,) = recorded.of(WaitingOver)
    assert not over.taken_back
    assert [m.content for m in turn.session.conversation.messages] == ["Hello?", "Ready."]


async def test_a_waiting_message_taken_back_says_so() -> None:
    loader = ModelLoader(lambda outcome: None, lambda path, settings: ScriptedEngine())
    recorded = Recorded(None, loader=loader)
    loader.load(ModelCandidate(Path("/models/x.gguf"), 0, "test"), ModelSettings())
    recorded.turn.send("wait")
    assert recorded.turn.take_back_waiting() == "wait"
    (over,) = recorded.of(WaitingOver)
    assert over.taken_back and over.text == "wait"
    assert recorded.turn.waiting is None


async def test_while_the_conversation_is_counted_nothing_is_sent() -> None:
    recorded = Recorded(ScriptedEngine())
    recorded.turn.counting = lambda: True
    refused = recorded.turn.send("Hi")
    assert isinstance(refused, Refused) and "Still counting" in refused.text
    assert not recorded.turn.session.conversation.messages


async def test_the_pause_in_typing_prefills_what_would_be_sent() -> None:
    engine = ScriptedEngine()
    recorded = Recorded(engine)
    turn = recorded.turn
    turn.typed = lambda: "Almost sent"
    turn.schedule_prefill()
    assert turn.prefill_pending
    await recorded.until(lambda: engine.prefills, timeout=5)
    assert engine.prefills[-1][-1] == {"role": "user", "content": "Almost sent"}
    assert not turn.prefill_pending


@pytest.mark.model
async def test_the_real_model_replies_and_the_next_message_was_evaluated_ahead(
    demo_model: Path, tmp_path: Path
) -> None:
    from chat.engine.llama import load_engine

    engine = load_engine(demo_model, ModelSettings(n_ctx=2048), tmp_path / "llama.log")
    try:
        settings = Settings()
        settings.sampling.max_tokens = 24
        settings.sampling.seed = 7
        recorded = Recorded(engine, settings=settings)
        turn = recorded.turn
        assert turn.send("Name a colour.") is None
        await asyncio.wait_for(turn.stopped(), 60)
        (ended,) = recorded.of(TurnEnded)
        assert ended.reply.content and ended.reply.stats.generated_tokens > 0
        assert recorded.text() == ended.reply.content
        # Typed, then a pause: the message is evaluated ahead, so sending it
        # evaluates (next to) nothing more.
        turn.typed = lambda: "And another?"
        turn.prefill_now()
        prompt = turn.session.prefill_prompt("And another?")
        assert prompt is not None
        tokens = engine.tokenize_chat(*prompt)
        # All but the last token: that one is evaluated with the reply, for its logits.
        await recorded.until(lambda: engine.cached_prefix(tokens) >= len(tokens) - 1, timeout=60)
        assert turn.send("And another?") is None
        await asyncio.wait_for(turn.stopped(), 60)
        second = recorded.of(TurnEnded)[-1].reply
        assert second.stats is not None
        assert second.stats.prompt_evaluated <= 2, second.stats
    finally:
        engine.close()
