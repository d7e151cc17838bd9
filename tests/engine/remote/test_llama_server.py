"""The llama-server engine against a real llama-server (built by
.ci/llama-server) serving the demo model on loopback."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from chat.engine.protocol import Finished, PromptProgress, TokenEvent
from chat.engine.remote import ServerConfig, connect
from chat.engine.remote.engine import RemoteEngine
from chat.errors import ServerAuthError
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import reply_cut_by_a_killed_server, run_reply
from tests.servers import RunningServer, llama_server

pytestmark = pytest.mark.model

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
ASK = {"role": "user", "content": "Name three colours."}
GREEDY = SamplingSettings(temperature=0, max_tokens=24)


def test_detects_llama_server_and_its_window(engine: RemoteEngine, server: RunningServer) -> None:
    info = engine.info
    assert info.kind == "llama-server" and info.server_url == server.url
    assert info.n_ctx == 4096 and info.n_ctx_known and info.count_exact
    assert info.n_ctx_train == 8192
    assert "SmolLM2" in info.name
    assert info.device_text() == f"llama-server at {server.url}"
    # Every sampling setting is sent; the demo model does not think.
    assert engine.ignored_settings == {"thinking", "thinking_budget", "keep_thinking"}
    assert engine.probs_note is None


def test_count_is_what_the_server_evaluates_and_turn_two_reuses_it(
    engine: RemoteEngine,
) -> None:
    # A first turn no earlier test has cached a prefix of (a fresh system prompt).
    first = [{"role": "system", "content": "You count tokens carefully."}, ASK]
    counted = engine.tokenize_chat(first)
    _, finished = run_reply(engine, first, GREEDY)
    stats = finished.stats
    assert stats.prompt_tokens == len(counted)  # the server's prompt_n + cache_n
    assert stats.finish_reason in ("done", "max_tokens")
    second = [*first, {"role": "assistant", "content": finished.text}, ASK]
    counted_again = engine.tokenize_chat(second)
    _, again = run_reply(engine, second, GREEDY)
    assert again.stats.prompt_tokens == len(counted_again)
    # Only the new turn (and what differs of the reply re-tokenized) is evaluated.
    assert again.stats.prompt_evaluated < len(counted_again) - len(counted) + 10
    assert again.stats.prompt_reused >= len(counted) - 5


def test_streams_tokens_then_figures(engine: RemoteEngine) -> None:
    tokens, finished = run_reply(engine, [SYSTEM, ASK], GREEDY)
    assert tokens and all(isinstance(t, TokenEvent) for t in tokens)
    assert finished.text == "".join(t.text for t in tokens) and finished.text.strip()
    stats = finished.stats
    assert stats.generated_tokens == len([t for t in tokens if t.token_id >= 0])
    assert stats.decode_tps > 0 and 0 < stats.ttft_s <= stats.total_s
    if stats.finish_reason == "done":
        assert finished.token_ids is not None and len(finished.token_ids) == len(tokens)


def test_max_tokens_ends_with_max_tokens(engine: RemoteEngine) -> None:
    _, finished = run_reply(engine, [SYSTEM, ASK], SamplingSettings(temperature=0, max_tokens=3))
    assert finished.stats.finish_reason == "max_tokens"
    assert finished.stats.generated_tokens == 3


def test_seed_and_temperature_reproduce_a_reply(engine: RemoteEngine) -> None:
    sampling = SamplingSettings(temperature=1.0, seed=1234, max_tokens=20)
    _, one = run_reply(engine, [SYSTEM, ASK], sampling)
    _, two = run_reply(engine, [SYSTEM, ASK], sampling)
    assert one.text == two.text and one.stats.seed == 1234


def test_probabilities_are_recorded(engine: RemoteEngine) -> None:
    tokens, finished = run_reply(engine, [SYSTEM, ASK], GREEDY, record_probs=True)
    assert len(finished.choices) == len(tokens)
    first = tokens[0].choice
    assert first is not None and first.token_id == tokens[0].token_id
    assert 0 < first.raw_prob <= 1 and len(first.raw_top) == 5
    assert first.greedy and first.prob == 1.0  # temperature 0
    assert first.raw_top[0][1] >= first.raw_top[-1][1]


def test_cancel_stops_at_once_and_frees_the_slot(engine: RemoteEngine) -> None:
    cancel = threading.Event()
    long = SamplingSettings(temperature=0.8, max_tokens=3500)
    story = [SYSTEM, {"role": "user", "content": "Write a very long story about a ship."}]
    stream = engine.stream_reply(story, long, cancel)
    seen = [next(stream) for _ in range(5)]
    cancel.set()
    began = time.monotonic()
    rest = list(stream)
    assert time.monotonic() - began < 1.0
    finished = rest[-1]
    assert isinstance(finished, Finished) and finished.stats.finish_reason == "stopped"
    assert finished.text.startswith("".join(t.text for t in seen if isinstance(t, TokenEvent)))
    # The slot is free: the next request is answered, not after 3,500 tokens
    # (over a minute here; a loaded machine answers this in a few seconds).
    began = time.monotonic()
    _, after = run_reply(engine, [SYSTEM, ASK], SamplingSettings(temperature=0, max_tokens=4))
    assert after.stats.finish_reason == "max_tokens" and time.monotonic() - began < 30


def test_prefill_warms_the_slot(engine: RemoteEngine) -> None:
    prompt = [{"role": "system", "content": "Prefill me, please."}, ASK]
    assert engine.prefill(prompt)
    _, finished = run_reply(engine, prompt, GREEDY)
    assert finished.stats.prompt_evaluated <= 1


def test_server_state_methods_say_the_server_owns_the_cache(engine: RemoteEngine) -> None:
    assert engine.save_state() is None and engine.cached_prefix([1, 2, 3]) == 0
    identity = engine.state_identity()
    assert identity.model_size == 0 and identity.library == "remote"
    engine.reset()


def test_server_killed_mid_reply_keeps_the_partial_text(tmp_path: Path) -> None:
    story = [SYSTEM, {"role": "user", "content": "Write a very long story about a ship."}]
    with llama_server(tmp_path) as doomed:
        reply_cut_by_a_killed_server(doomed, story)


def test_api_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = "kvchat-test-key-5f2c"
    with llama_server(tmp_path, extra=["--api-key", key]) as guarded:
        wrong = "kvchat-wrong-key-91ab"
        with pytest.raises(ServerAuthError) as caught:
            connect(ServerConfig(guarded.url, api_key=wrong, api_key_env="KVCHAT_SERVER_KEY"))
        assert "KVCHAT_SERVER_KEY" in str(caught.value) and wrong not in str(caught.value)
        with pytest.raises(ServerAuthError, match="KVCHAT_SERVER_KEY"):
            connect(ServerConfig(guarded.url, api_key_env="KVCHAT_SERVER_KEY"))
        engine = connect(ServerConfig(guarded.url, api_key=key, api_key_env="KVCHAT_SERVER_KEY"))
        _, finished = run_reply(engine, [SYSTEM, ASK], SamplingSettings(max_tokens=4))
        assert finished.stats.generated_tokens == 4
        assert key not in repr(engine)
        engine.close()
    logged = caplog.text
    assert key not in logged and wrong not in logged


def test_a_finished_reply_counts_as_the_next_prompt_holds_it(engine: RemoteEngine) -> None:
    answered = [SYSTEM, ASK, {"role": "assistant", "content": "Red, green and blue."}]
    closed = engine.tokenize_chat(answered, add_generation_prompt=False)
    following = engine.tokenize_chat([*answered, ASK])
    assert following[: len(closed)] == closed
    # The end-of-turn marker is counted (llama-server alone leaves the reply open).
    assert len(closed) > len(engine.tokenize_chat(answered[:2], True)) + 4


def test_esc_on_a_reply_waiting_for_a_prefill_ends_the_prefills_request(tmp_path: Path) -> None:
    # A reply sent while its prompt is prefilled waits for the prefill, which
    # reads that prompt into the server's cache. Esc then ended the reply only
    # once the server had read the whole prompt (19 s for 1,941 tokens here):
    # the prefill's request now ends at once, and the server stops reading.
    words = " ".join(f"word{i % 97}" for i in range(1_400))
    long = [SYSTEM, {"role": "user", "content": f"Summarise this: {words}"}]
    # Batches of 512: the server looks at its connections between batches.
    with llama_server(tmp_path, extra=["-b", "512", "-ub", "512"], threads=1) as slow:
        engine = connect(ServerConfig(slow.url))
        try:
            assert len(engine.tokenize_chat(long)) > 2_500  # well over 10 s on one thread
            prefill = threading.Thread(target=engine.prefill, args=(long,))
            prefill.start()
            time.sleep(0.5)  # the server is reading it
            cancel = threading.Event()
            threading.Timer(0.5, cancel.set).start()
            began = time.monotonic()
            _, finished = run_reply(engine, long, GREEDY, cancel=cancel)
            stopped_after = time.monotonic() - began
            prefill.join(10)
            assert not prefill.is_alive()
            assert finished.stats.finish_reason == "stopped" and not finished.text
            assert stopped_after < 3, stopped_after
            # The server goes on with the next request.
            _, again = run_reply(engine, [SYSTEM, ASK], GREEDY)
            assert again.text and again.stats.finish_reason != "error"
        finally:
            engine.close()


def test_a_long_prompt_says_how_far_the_server_has_read_it(engine: RemoteEngine) -> None:
    # llama-server streams its reading of the prompt (`return_progress`):
    # the status bar's "Reading prompt" on a server too (it showed
    # "generating…" for the 20 s of a 1,941-token prompt).
    words = " ".join(f"word{i % 89}" for i in range(500))
    long = [SYSTEM, {"role": "user", "content": f"Summarise this: {words}"}]
    cancel = threading.Event()
    events = list(engine.stream_reply(long, GREEDY, cancel))
    finished = events[-1]
    assert isinstance(finished, Finished)
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokenEvent))
    read = [e for e in events if isinstance(e, PromptProgress)]
    assert read and all(events.index(e) < first_token for e in read)
    assert all(0 <= e.done <= e.total for e in read)
    assert read[-1].done == read[-1].total == finished.stats.prompt_evaluated
    # Sent again with a new question: only the part not cached is counted.
    again = [*long, {"role": "assistant", "content": finished.text}, ASK]
    events = list(engine.stream_reply(again, GREEDY, cancel))
    finished = events[-1]
    assert isinstance(finished, Finished)
    read = [e for e in events if isinstance(e, PromptProgress)]
    assert read and read[-1].total == finished.stats.prompt_evaluated < 100
