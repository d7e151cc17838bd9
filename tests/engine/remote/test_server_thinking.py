"""Thinking that a model server sends in a field of its own (issue 29 point 1):
streamed apart from the answer, kept beside it, never mixed into its text.
Against fake servers that speak the documented formats (no vLLM here)."""

from __future__ import annotations

import threading

import pytest

from chat.engine.remote import connect
from chat.session.reply_stream import ReplyChunk, ReplyEnded, ReplyEvent, ReplyStream
from chat.settings.schema import SamplingSettings
from chat.settings.server import ServerConfig
from tests.engine.remote.fake_servers import ollama_routes, openai_routes, serve

QUESTION = [{"role": "user", "content": "Why?"}]


def stream_all(url: str, kind: str = "openai") -> list[ReplyEvent]:
    engine = connect(ServerConfig(url=url, kind=kind))  # type: ignore[arg-type]
    events: list[ReplyEvent] = []
    done = threading.Event()

    def deliver(event: ReplyEvent) -> None:
        events.append(event)
        if not isinstance(event, ReplyChunk):  # the end, or a failure
            done.set()

    stream = ReplyStream(engine, QUESTION, SamplingSettings(), deliver, frame_s=0.0)
    stream.start()
    assert done.wait(30)
    stream.join(10)
    engine.close()
    return events


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_servers_thinking_field_streams_apart_and_is_kept_beside_the_answer(
    field: str,
) -> None:
    server = serve(
        openai_routes(
            words=["Because", " of", " light."],
            thinking=["The sky", " scatters\x1b[31m blue"],
            thinking_field=field,
        )
    )
    try:
        events = stream_all(server.url)
    finally:
        server.stop()
    chunks = [event for event in events if isinstance(event, ReplyChunk)]
    (ended,) = [event for event in events if isinstance(event, ReplyEnded)]
    assert "".join(chunk.thinking for chunk in chunks) == ended.thinking
    assert ended.thinking == "The sky scatters blue"  # its escape sequence gone
    assert ended.finished.text == "Because of light."
    assert "".join(chunk.text for chunk in chunks) == "Because of light."
    assert sum(chunk.thinking_tokens for chunk in chunks) == 2
    stats = ended.finished.stats
    assert stats.thinking_tokens == 2
    assert stats.first_answer_s is not None and stats.first_answer_s >= stats.ttft_s
    assert ended.finished.token_ids is None  # ids would spell more than the answer


def test_ollamas_thinking_streams_apart_from_its_answer() -> None:
    server = serve(ollama_routes(words=["Blue", " light."], thinking=["Short", " waves"]))
    try:
        events = stream_all(server.url, kind="ollama")
    finally:
        server.stop()
    (ended,) = [event for event in events if isinstance(event, ReplyEnded)]
    assert ended.thinking == "Short waves"
    assert ended.finished.text == "Blue light."
    assert ended.finished.stats.thinking_tokens == 2
