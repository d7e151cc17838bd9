"""Freeing the real model while other threads use it (what quitting does): the
model is freed only once no call uses it, and calls made afterwards are
refused instead of reaching freed memory (a crash, before)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.llama import LlamaEngine, load_engine
from chat.errors import EngineClosedError
from chat.session.reply_stream import ReplyChunk, ReplyEnded, ReplyEvent, ReplyStream
from chat.settings.schema import ModelSettings, SamplingSettings

STORY = [{"role": "user", "content": "Write a very long story about a dragon."}]


@pytest.fixture
def own_engine(demo_model: Path, tmp_path: Path) -> Iterator[LlamaEngine]:
    """An engine of its own: these tests close it."""
    loaded = load_engine(demo_model, ModelSettings(n_ctx=512), tmp_path / "llama.log")
    yield loaded
    loaded.close()


def model_freed(engine: LlamaEngine) -> bool:
    return engine.llama._model.model is None


def test_closing_mid_reply_ends_the_reply_first_then_frees_the_model(
    own_engine: LlamaEngine,
) -> None:
    events: list[ReplyEvent] = []
    streaming = threading.Event()

    def deliver(event: ReplyEvent) -> None:
        events.append(event)
        if isinstance(event, ReplyChunk):
            streaming.set()

    stream = ReplyStream(
        own_engine, STORY, SamplingSettings(temperature=0.0, max_tokens=400), deliver, frame_s=0
    )
    stream.start()
    assert streaming.wait(30)
    own_engine.close()  # not cancelled: closing alone ends the reply
    assert model_freed(own_engine)
    assert stream.join(10)
    ended = events[-1]
    assert isinstance(ended, ReplyEnded)
    assert ended.finished.stats.finish_reason == "stopped"
    assert 0 < ended.finished.stats.generated_tokens < 400


def test_calls_after_close_are_refused(own_engine: LlamaEngine) -> None:
    own_engine.close()
    with pytest.raises(EngineClosedError):
        own_engine.tokenize_chat(STORY)
    with pytest.raises(EngineClosedError):
        next(iter(own_engine.stream_reply(STORY, SamplingSettings(), threading.Event())))
    assert own_engine.prefill(STORY) is False
    own_engine.close()  # twice is harmless


def test_closing_while_another_thread_counts_tokens_waits_for_its_call(
    own_engine: LlamaEngine,
) -> None:
    # The context meter counts in a thread, without the engine's lock.
    long_text = [{"role": "user", "content": "word " * 3000}]
    counted = threading.Event()
    outcome: list[BaseException] = []

    def count_forever() -> None:
        try:
            while True:
                own_engine.tokenize_chat(long_text)
                counted.set()
        except BaseException as error:
            outcome.append(error)

    counter = threading.Thread(target=count_forever)
    counter.start()
    assert counted.wait(30)
    own_engine.close()
    counter.join(10)
    assert model_freed(own_engine)
    assert len(outcome) == 1 and isinstance(outcome[0], EngineClosedError)
