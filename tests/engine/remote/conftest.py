"""Helpers for the remote engine tests: run a reply to its end, or have its
server killed under it; a real llama-server for a module's tests (`server`,
which a module may override with another real server) and an engine
connected to it (`engine`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chat.engine.protocol import EngineEvent, Finished, PromptProgress, TokenEvent
from chat.engine.remote import ServerConfig, connect
from chat.engine.remote.engine import RemoteEngine
from chat.errors import ServerUnreachableError
from chat.settings.schema import SamplingSettings
from tests.engine.remote.fake_servers import FakeServer, Route, serve
from tests.servers import RunningServer, llama_server

HELLO = [{"role": "user", "content": "Say hello to my friend."}]
# The benchmark's story: at some seeds the demo model samples `\n\n` as one
# token that its tokenizer makes two of, so the reply's text tokenizes
# otherwise than it was sampled (the tests that send a reply's ids use it).
STORY = [
    {
        "role": "user",
        "content": "Write a long story about a lighthouse keeper and the sea. Use many details.",
    }
]
SHORTER = {"role": "user", "content": "Now make it shorter."}
ASK = [{"role": "user", "content": "Name three colours."}]


def answered(messages: list[dict[str, Any]], reply: Finished) -> list[dict[str, Any]]:
    """`messages` and the reply, as kvchat sends it back (its ids with it)."""
    assert reply.token_ids is not None
    return [*messages, {"role": "assistant", "content": reply.text, "token_ids": reply.token_ids}]


def as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` without the ids of their replies."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def run_reply(
    engine: object,
    messages: list[dict[str, str]] = HELLO,
    sampling: SamplingSettings | None = None,
    record_probs: bool = False,
    cancel: threading.Event | None = None,
) -> tuple[list[TokenEvent], Finished]:
    assert isinstance(engine, RemoteEngine)
    events: list[EngineEvent] = list(
        engine.stream_reply(
            messages, sampling or SamplingSettings(), cancel or threading.Event(), record_probs
        )
    )
    *streamed, finished = events
    assert isinstance(finished, Finished)
    # How far the prompt was read (llama-server) comes before the tokens.
    tokens = [e for e in streamed if not isinstance(e, PromptProgress)]
    assert all(isinstance(t, TokenEvent) for t in tokens)
    return tokens, finished  # type: ignore[return-value]


@pytest.fixture
def fake() -> Iterator[list[FakeServer]]:
    """Servers started by a test (`start`), stopped after it."""
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with llama_server(tmp_path_factory.mktemp("llama-server")) as running:
        yield running


@pytest.fixture
def engine(server: RunningServer) -> Iterator[RemoteEngine]:
    connected = connect_to(server)
    yield connected
    connected.close()


def start(
    started: list[FakeServer], routes: dict[tuple[str, str], Route], api_key: str | None = None
) -> FakeServer:
    server = serve(routes, api_key)
    started.append(server)
    return server


def connect_to(server: FakeServer | RunningServer, **options: object) -> RemoteEngine:
    engine = connect(ServerConfig(server.url, **options))  # type: ignore[arg-type]
    assert isinstance(engine, RemoteEngine)
    return engine


def reply_cut_by_a_killed_server(
    server: RunningServer,
    messages: list[dict[str, str]],
    kill: Callable[[], object] | None = None,
) -> Finished:
    """Kill `server` (or call `kill`, which brings it down another way) a few
    tokens into a long reply: the partial text is kept, the reply ends "error"
    with a message naming the server, and connecting again says nothing
    answers there. Returns the reply as it ended."""
    engine = connect(ServerConfig(server.url))
    stream = engine.stream_reply(messages, SamplingSettings(max_tokens=2000), threading.Event())
    seen = [next(stream) for _ in range(5)]
    (kill or server.kill)()
    finished = list(stream)[-1]
    assert isinstance(finished, Finished)
    assert finished.stats.finish_reason == "error"
    assert finished.error is not None and server.url in finished.error
    assert finished.text.startswith("".join(t.text for t in seen if isinstance(t, TokenEvent)))
    engine.close()
    with pytest.raises(ServerUnreachableError, match=server.url.replace(".", r"\.")):
        connect(ServerConfig(server.url, connect_timeout_s=2))
    return finished
