"""The generic OpenAI-compatible engine against a real server: llama-cpp-python's
own (`python -m llama_cpp.server`, its [server] extra) serving the demo model
on loopback. It cannot tokenize for kvchat, so the meter estimates and is
corrected from the server's own counts; everything else works as with
llama-server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.protocol import Finished, TokenEvent
from chat.engine.remote.engine import RemoteEngine
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import reply_cut_by_a_killed_server, run_reply
from tests.servers import RunningServer, llama_cpp_server

pytestmark = pytest.mark.model

ASK = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Name three colours."},
]
GREEDY = SamplingSettings(temperature=0, max_tokens=16, seed=7)
STORY = [{"role": "user", "content": "Write a very long story about a ship."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with llama_cpp_server(tmp_path_factory.mktemp("llama-cpp-server"), n_ctx=2048) as running:
        yield running


def test_detected_as_an_openai_compatible_server(
    engine: RemoteEngine, server: RunningServer
) -> None:
    info = engine.info
    assert info.kind == "openai" and info.server_url == server.url
    assert "SmolLM2" in info.name
    # It cannot count before sending: the meter says it estimates.
    assert not info.count_exact


def test_a_reply_streams_with_the_servers_own_counts(engine: RemoteEngine) -> None:
    estimate = len(engine.tokenize_chat(ASK))
    tokens, finished = run_reply(engine, ASK, GREEDY)
    assert tokens and all(isinstance(token, TokenEvent) for token in tokens)
    assert (
        finished.text.strip() and finished.text.strip() == "".join(t.text for t in tokens).strip()
    )
    stats = finished.stats
    assert stats.finish_reason in ("done", "max_tokens")
    assert 0 < stats.generated_tokens <= 16
    # The prompt size is the server's (usage.prompt_tokens); the estimate was close.
    assert stats.prompt_tokens > 0 and abs(stats.prompt_tokens - estimate) <= 0.5 * estimate


def test_the_same_seed_and_greedy_sampling_give_the_same_reply(engine: RemoteEngine) -> None:
    _, first = run_reply(engine, ASK, GREEDY)
    _, again = run_reply(engine, ASK, GREEDY)
    assert first.text == again.text and first.text


def test_esc_keeps_the_text_so_far(engine: RemoteEngine) -> None:
    cancel = threading.Event()
    stream = engine.stream_reply(STORY, SamplingSettings(max_tokens=400), cancel)
    seen = [next(stream) for _ in range(4)]
    cancel.set()
    finished = list(stream)[-1]
    assert isinstance(finished, Finished) and finished.stats.finish_reason == "stopped"
    assert finished.text.startswith("".join(t.text for t in seen if isinstance(t, TokenEvent)))


def test_server_killed_mid_reply_keeps_the_partial_text(tmp_path: Path) -> None:
    with llama_cpp_server(tmp_path, n_ctx=2048) as doomed:
        reply_cut_by_a_killed_server(doomed, STORY)
