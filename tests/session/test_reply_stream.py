"""The reply stream without Textual: what a screen receives while a reply is
generated, on a scripted engine and on the real demo model."""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import replace

import pytest

from chat.conversations.token_probs_codec import StoredTokenChoices, decode_token_probs
from chat.engine.protocol import Engine
from chat.session.reply_stream import (
    ReplyChunk,
    ReplyEnded,
    ReplyEvent,
    ReplyFailed,
    ReplyStream,
)
from chat.settings.schema import SamplingSettings
from tests.fakes import ScriptedEngine

QUESTION = [{"role": "user", "content": "Say hello."}]


def run_to_end(stream: ReplyStream, events: queue.Queue[ReplyEvent]) -> list[ReplyEvent]:
    """Every event the stream delivers, up to its end or failure."""
    stream.start()
    received: list[ReplyEvent] = []
    while True:
        event = events.get(timeout=60)
        received.append(event)
        if isinstance(event, (ReplyEnded, ReplyFailed)):
            assert stream.join(10)
            return received


def stream_of(
    engine: Engine, sampling: SamplingSettings | None = None, **options: float
) -> tuple[ReplyStream, queue.Queue[ReplyEvent]]:
    events: queue.Queue[ReplyEvent] = queue.Queue()
    stream = ReplyStream(engine, QUESTION, sampling or SamplingSettings(), events.put, **options)
    return stream, events


def test_chunks_add_up_to_the_reply_then_it_ends() -> None:
    engine = ScriptedEngine(replies=[["Hel", "lo", " wor", "ld"]])
    stream, events = stream_of(engine)
    received = run_to_end(stream, events)
    chunks = [e for e in received if isinstance(e, ReplyChunk)]
    assert isinstance(received[-1], ReplyEnded)
    assert "".join(c.text for c in chunks) == "Hello world" == received[-1].finished.text
    assert sum(c.tokens for c in chunks) == 4
    assert stream.text == "Hello world"


def test_tokens_within_one_frame_travel_together() -> None:
    # 20 tokens 1 ms apart inside frames of 1 s: one chunk at the first token,
    # the rest together at the end.
    engine = ScriptedEngine(replies=[[f"t{i} " for i in range(20)]], delay=0.001)
    stream, events = stream_of(engine, frame_s=1.0)
    chunks = [e for e in run_to_end(stream, events) if isinstance(e, ReplyChunk)]
    assert len(chunks) <= 2
    assert sum(c.tokens for c in chunks) == 20


def test_every_token_is_a_chunk_when_frames_are_shorter_than_tokens() -> None:
    engine = ScriptedEngine(replies=[["a", "b", "c"]], delay=0.01)
    stream, events = stream_of(engine, frame_s=0.0, tokens_per_frame=1)
    chunks = [e for e in run_to_end(stream, events) if isinstance(e, ReplyChunk)]
    assert [c.text for c in chunks] == ["a", "b", "c"]


def test_after_the_first_token_a_frame_waits_for_a_few_tokens() -> None:
    # Frames of no length: each piece goes as soon as 5 tokens wait, the
    # first at once (a stall of 1/12 s would send fewer).
    engine = ScriptedEngine(replies=[[f"t{i} " for i in range(41)]], delay=0.001)
    stream, events = stream_of(engine, frame_s=0.0, tokens_per_frame=5)
    chunks = [e for e in run_to_end(stream, events) if isinstance(e, ReplyChunk)]
    assert chunks[0].tokens == 1
    assert all(c.tokens <= 5 for c in chunks)
    assert sum(c.tokens == 5 for c in chunks) >= 6
    assert sum(c.tokens for c in chunks) == 41


def test_a_very_slow_model_is_still_drawn_twelve_times_a_second() -> None:
    # 60 ms a token: five tokens would take 0.3 s; a frame waits at most 1/12 s.
    engine = ScriptedEngine(replies=[[f"t{i} " for i in range(9)]], delay=0.06)
    stream, events = stream_of(engine)
    chunks = [e for e in run_to_end(stream, events) if isinstance(e, ReplyChunk)]
    assert all(c.tokens <= 2 for c in chunks)
    assert sum(c.tokens for c in chunks) == 9


def test_saving_is_due_once_per_interval() -> None:
    # 30 tokens 10 ms apart (0.3 s), each its own chunk, saving due every 0.1 s:
    # about three saves, never two chunks in a row.
    engine = ScriptedEngine(replies=[[f"{i} " for i in range(30)]], delay=0.01)
    stream, events = stream_of(engine, frame_s=0.0, save_interval_s=0.1)
    due = [e.save_due for e in run_to_end(stream, events) if isinstance(e, ReplyChunk)]
    assert 1 <= sum(due) <= 4
    assert not any(a and b for a, b in itertools.pairwise(due))


def test_cancel_ends_the_reply_as_stopped_with_what_it_wrote() -> None:
    engine = ScriptedEngine(replies=[[f"w{i} " for i in range(1000)]], delay=0.002)
    stream, events = stream_of(engine)
    stream.start()
    assert engine.started.wait(10)
    stream.cancel()
    received: list[ReplyEvent] = []
    while not received or not isinstance(received[-1], ReplyEnded):
        received.append(events.get(timeout=10))
    ended = received[-1]
    assert isinstance(ended, ReplyEnded)
    assert ended.finished.stats.finish_reason == "stopped"
    assert 0 < ended.finished.stats.generated_tokens < 1000
    assert stream.join(10)


def test_a_prompt_too_long_fails_without_chunks() -> None:
    engine = ScriptedEngine(n_ctx=4)
    stream, events = stream_of(engine)
    received = run_to_end(stream, events)
    assert len(received) == 1
    failed = received[0]
    assert isinstance(failed, ReplyFailed) and failed.prompt_too_long
    assert "window holds 4" in failed.error


def test_an_engine_failure_is_reported_in_words() -> None:
    class Broken(ScriptedEngine):
        def stream_reply(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def,override]
            raise RuntimeError("llama_decode returned -3")

    stream, events = stream_of(Broken())
    (failed,) = run_to_end(stream, events)
    assert isinstance(failed, ReplyFailed) and not failed.prompt_too_long
    assert failed.error == "Generation failed: llama_decode returned -3"


@pytest.mark.model
def test_the_real_model_streams_the_same_reply_it_finishes_with(engine: Engine) -> None:
    sampling = replace(SamplingSettings(), temperature=0.0, max_tokens=40, seed=3)
    stream, events = stream_of(engine, sampling)
    received = run_to_end(stream, events)
    ended = received[-1]
    assert isinstance(ended, ReplyEnded), received[-1]
    chunks = [e for e in received if isinstance(e, ReplyChunk)]
    assert "".join(c.text for c in chunks) == ended.finished.text == stream.text
    assert ended.finished.text.strip()
    assert sum(c.tokens for c in chunks) == ended.finished.stats.generated_tokens


@pytest.mark.model
def test_the_real_models_token_choices_come_encoded_from_the_replys_thread(
    engine: Engine,
) -> None:
    # The UI thread saves the reply as it ends: the choices' stored form is
    # made on the reply's thread, and reads back as what was recorded.
    sampling = replace(SamplingSettings(), temperature=0.7, max_tokens=30, seed=11)
    events: queue.Queue[ReplyEvent] = queue.Queue()
    stream = ReplyStream(engine, QUESTION, sampling, events.put, record_probs=True)
    ended = run_to_end(stream, events)[-1]
    assert isinstance(ended, ReplyEnded)
    choices = ended.finished.choices
    assert isinstance(choices, StoredTokenChoices) and choices.decoded
    assert len(choices) == ended.finished.stats.generated_tokens
    assert decode_token_probs(choices.data) == list(choices)


def test_token_choices_that_cannot_be_encoded_leave_the_reply_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Encoding on the reply's thread saves the UI thread time; it never fails a reply.
    from chat.conversations.conversation import ReplyStats, TokenChoice
    from chat.engine.protocol import Finished
    from chat.session import reply_stream

    def broken(choices: object) -> StoredTokenChoices:
        raise MemoryError

    monkeypatch.setattr(StoredTokenChoices, "encoded", staticmethod(broken))
    choice = TokenChoice(1, "hi", 1.0, 1.0, [("hi", 1.0)], [("hi", 1.0)], True)
    stats = ReplyStats(5, 5, 1, 0.1, 10.0, "done")
    ended = ReplyEnded(Finished("hi", stats, (choice,)))
    assert reply_stream._choices_encoded(ended) is ended


@pytest.mark.model
def test_the_real_model_stops_within_a_token_of_cancel(engine: Engine) -> None:
    sampling = replace(SamplingSettings(), temperature=0.8, max_tokens=2000, seed=5)
    first_chunk = threading.Event()
    events: queue.Queue[ReplyEvent] = queue.Queue()

    def deliver(event: ReplyEvent) -> None:
        events.put(event)
        if isinstance(event, ReplyChunk) and event.tokens:
            first_chunk.set()

    story = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    stream = ReplyStream(engine, story, sampling, deliver)
    stream.start()
    assert first_chunk.wait(60)
    stream.cancel()
    assert stream.join(10)
    received: list[ReplyEvent] = []
    while not events.empty():
        received.append(events.get())
    ended = received[-1]
    assert isinstance(ended, ReplyEnded)
    assert ended.finished.stats.finish_reason == "stopped"
    assert ended.finished.stats.generated_tokens < 2000
