"""vLLM, Ollama and generic OpenAI-compatible servers, as protocol-faithful
fakes on loopback: detection, window, counts, figures, probabilities, and
what a broken stream does."""

from __future__ import annotations

import json
import threading
import time

import pytest

from chat.engine.remote import ServerConfig, connect
from chat.engine.remote.estimate import TokenEstimate
from chat.engine.remote.http import MAX_LINE_BYTES
from chat.errors import (
    ServerAuthError,
    ServerError,
    ServerUnreachableError,
    UnknownServerModelError,
)
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import HELLO, connect_to, run_reply, start
from tests.engine.remote.fake_servers import (
    OLLAMA_MODEL,
    OPENAI_MODEL,
    REPLY_WORDS,
    VLLM_MODEL,
    FakeServer,
    ollama_routes,
    openai_routes,
    slow_words,
    toy_tokens,
    vllm_routes,
)

REPLY = "".join(REPLY_WORDS)

# -- vLLM --------------------------------------------------------------------------------


def test_vllm_is_detected_with_its_window_and_exact_counts(fake: list[FakeServer]) -> None:
    server = start(fake, vllm_routes())
    engine = connect_to(server)
    info = engine.info
    assert (info.kind, info.name, info.n_ctx) == ("vllm", VLLM_MODEL, 8192)
    assert info.count_exact and info.n_ctx_known and "max_model_len" in info.n_ctx_source
    assert info.device_text() == f"vllm at {server.url}"
    assert engine.tokenize_chat(HELLO) == toy_tokens(HELLO, True)
    assert server.last("/tokenize").body["add_generation_prompt"] is True
    engine.close()


def test_vllm_sends_the_counted_ids_and_reports_the_servers_figures(
    fake: list[FakeServer],
) -> None:
    server = start(fake, vllm_routes(finish="length", cached=7))
    engine = connect_to(server)
    sampling = SamplingSettings(seed=42, temperature=0.5, top_k=0, max_tokens=5)
    tokens, finished = run_reply(engine, sampling=sampling)
    sent = server.last("/v1/completions").body
    counted = engine.tokenize_chat(HELLO)
    assert sent["prompt"] == counted
    assert sent["seed"] == 42 and sent["top_k"] == -1 and sent["max_tokens"] == 5
    assert sent["stream_options"] == {"include_usage": True}
    assert finished.text == REPLY == "".join(t.text for t in tokens)
    stats = finished.stats
    assert stats.prompt_tokens == len(counted)
    assert stats.prompt_evaluated == len(counted) - 7
    assert stats.generated_tokens == len(REPLY_WORDS)
    assert stats.finish_reason == "max_tokens" and stats.seed == 42
    assert "typical_p" in engine.ignored_settings and "top_k" not in engine.ignored_settings
    engine.close()


def test_vllm_logprobs_become_token_choices(fake: list[FakeServer]) -> None:
    engine = connect_to(start(fake, vllm_routes()))
    tokens, finished = run_reply(engine, record_probs=True)
    assert len(finished.choices) == len(REPLY_WORDS)
    first = tokens[0].choice
    assert first is not None and first.text == "Hello"
    assert first.raw_prob == pytest.approx(0.905, abs=0.01)
    assert [t for t, _ in first.raw_top] == ["Hello", " other"]
    assert first.greedy
    engine.close()


# -- Ollama --------------------------------------------------------------------------------


def test_ollama_window_from_the_models_num_ctx(fake: list[FakeServer]) -> None:
    server = start(fake, ollama_routes(num_ctx=8192))
    engine = connect_to(server)
    info = engine.info
    assert (info.kind, info.name, info.n_ctx, info.n_ctx_train) == (
        "ollama",
        OLLAMA_MODEL,
        8192,
        131072,
    )
    assert not info.count_exact and "parameters" in info.n_ctx_source
    run_reply(engine)
    assert "num_ctx" not in server.last("/api/chat").body["options"]
    engine.close()


def test_ollama_without_num_ctx_asks_for_a_window_it_then_knows(fake: list[FakeServer]) -> None:
    server = start(fake, ollama_routes(num_ctx=None))
    engine = connect_to(server)
    assert engine.info.n_ctx == 4096 and engine.info.n_ctx_known
    run_reply(engine)
    assert server.last("/api/chat").body["options"]["num_ctx"] == 4096
    engine.close()


def test_ollama_estimate_is_corrected_by_the_servers_count(fake: list[FakeServer]) -> None:
    engine = connect_to(start(fake, ollama_routes(prompt_eval_count=30)))
    before = len(engine.tokenize_chat(HELLO))
    _, finished = run_reply(engine)
    assert finished.stats.prompt_tokens == 30
    assert len(engine.tokenize_chat(HELLO)) == 30 != before
    assert finished.stats.decode_tps == pytest.approx(len(REPLY_WORDS) / 0.25)
    assert finished.text == REPLY and finished.stats.finish_reason == "done"
    engine.close()


def test_ollama_sends_sampling_as_options_and_records_logprobs(fake: list[FakeServer]) -> None:
    server = start(fake, ollama_routes(logprobs=True, done_reason="length"))
    engine = connect_to(server)
    sampling = SamplingSettings(seed=7, top_k=12, stop=["END"], max_tokens=5)
    tokens, finished = run_reply(engine, sampling=sampling, record_probs=True)
    options = server.last("/api/chat").body["options"]
    assert options["seed"] == 7 and options["top_k"] == 12 and options["stop"] == ["END"]
    assert options["num_predict"] == 5
    assert finished.stats.finish_reason == "max_tokens"
    assert tokens[0].choice is not None and tokens[0].choice.raw_top[1][0] == " nope"
    assert engine.ignored_settings == {
        "mirostat_mode",
        "mirostat_tau",
        "mirostat_eta",
        "thinking_budget",
        "keep_thinking",
    }
    engine.close()


def test_ollama_unknown_model_lists_the_served_ones(fake: list[FakeServer]) -> None:
    server = start(fake, ollama_routes())
    with pytest.raises(UnknownServerModelError) as caught:
        connect(ServerConfig(server.url, model="mistral"))
    assert caught.value.models == (OLLAMA_MODEL, "qwen2.5:0.5b")
    assert "mistral" in str(caught.value) and "qwen2.5:0.5b" in str(caught.value)
    # Ollama's shorthand: a name without a tag means ":latest".
    engine = connect(ServerConfig(server.url, model="llama3.2"))
    assert engine.info.name == OLLAMA_MODEL
    engine.close()


# -- generic OpenAI-compatible -----------------------------------------------------------------


def test_openai_window_unknown_is_said_so(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes())
    engine = connect_to(server)
    assert engine.info.kind == "openai" and engine.info.name == OPENAI_MODEL
    assert not engine.info.n_ctx_known and "unknown" in engine.info.n_ctx_source
    assert not engine.info.count_exact
    engine.close()
    configured = connect_to(server, n_ctx=16384)
    assert configured.info.n_ctx == 16384 and configured.info.n_ctx_known
    configured.close()


def test_openai_window_from_a_model_list_that_says_it(fake: list[FakeServer]) -> None:
    entry = {"id": OPENAI_MODEL, "object": "model", "context_length": 32768}
    engine = connect_to(start(fake, openai_routes(model_entry=entry)))
    assert engine.info.n_ctx == 32768 and engine.info.n_ctx_known
    engine.close()


def test_openai_reply_asks_for_usage_and_corrects_the_estimate(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes(prompt_tokens=40))
    engine = connect_to(server)
    sampling = SamplingSettings(seed=3, stop=["x"])
    tokens, finished = run_reply(engine, sampling=sampling, record_probs=True)
    body = server.last("/v1/chat/completions").body
    assert body["stream_options"] == {"include_usage": True} and body["seed"] == 3
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert body["messages"] == HELLO and "top_k" not in body
    assert finished.text == REPLY and finished.stats.prompt_tokens == 40
    assert len(engine.tokenize_chat(HELLO)) == 40
    assert len(finished.choices) == len(REPLY_WORDS) and finished.token_ids is None
    assert tokens[0].choice is not None and tokens[0].choice.raw_top[1] == (
        " else",
        pytest.approx(0.0408, abs=0.001),
    )
    assert {"top_k", "min_p", "mirostat_mode"} <= engine.ignored_settings
    engine.close()


def test_estimate_ratio_is_bounded() -> None:
    estimate = TokenEstimate()
    estimate.learn(HELLO, 10_000)
    assert estimate.ratio == 4.0


# -- faults, any kind ---------------------------------------------------------------------------


def test_nothing_listening_names_the_url() -> None:
    with pytest.raises(ServerUnreachableError, match=r"http://127\.0\.0\.1:9"):
        connect(ServerConfig("http://127.0.0.1:9", connect_timeout_s=2))


def test_not_a_model_server(fake: list[FakeServer]) -> None:
    server = start(fake, {})
    with pytest.raises(ServerError, match="not a model server"):
        connect(ServerConfig(server.url))


def test_wrong_key_names_the_variable_and_never_the_key(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes(), api_key="right-key")
    secret = "sk-wrong-secret-123"
    config = ServerConfig(server.url, api_key=secret, api_key_env="MY_KEY")
    with pytest.raises(ServerAuthError) as caught:
        connect(config)
    assert "MY_KEY" in str(caught.value) and secret not in str(caught.value)
    assert secret not in repr(config)
    assert server.seen[0].headers["Authorization"] == f"Bearer {secret}"
    good = connect(ServerConfig(server.url, api_key="right-key", api_key_env="MY_KEY"))
    assert "right-key" not in repr(good)
    good.close()


def test_malformed_line_before_any_text_raises(fake: list[FakeServer]) -> None:
    engine = connect_to(start(fake, openai_routes(stream_lines=lambda ls: [b"data: {oops", *ls])))
    with pytest.raises(ServerError, match="malformed"):
        run_reply(engine)
    engine.close()


def test_malformed_line_after_text_keeps_the_partial_reply(fake: list[FakeServer]) -> None:
    engine = connect_to(
        start(fake, openai_routes(stream_lines=lambda ls: [*ls[:2], b"data: [1, 2]", *ls[2:]]))
    )
    _, finished = run_reply(engine)
    assert finished.stats.finish_reason == "error"
    assert finished.text == "".join(REPLY_WORDS[:2])
    assert finished.error is not None and "malformed" in finished.error


def test_oversized_line_is_refused(fake: list[FakeServer]) -> None:
    huge = b"data: " + json.dumps({"x": "a" * (MAX_LINE_BYTES + 10)}).encode()
    engine = connect_to(start(fake, vllm_routes(stream_lines=lambda ls: [huge, *ls])))
    with pytest.raises(ServerError, match="KiB"):
        run_reply(engine)
    engine.close()


def test_server_error_event_mid_stream(fake: list[FakeServer]) -> None:
    error = b'data: {"error": {"message": "out of memory\\u001b[31m"}}'
    engine = connect_to(start(fake, openai_routes(stream_lines=lambda ls: [*ls[:1], error])))
    _, finished = run_reply(engine)
    assert finished.stats.finish_reason == "error" and finished.text == "Hello"
    assert finished.error is not None and "out of memory" in finished.error
    assert "\x1b" not in finished.error


def test_dropped_connection_keeps_the_partial_reply(fake: list[FakeServer]) -> None:
    engine = connect_to(start(fake, openai_routes(drop=True)))
    tokens, finished = run_reply(engine)
    assert finished.text == REPLY and len(tokens) == len(REPLY_WORDS)
    assert finished.stats.finish_reason == "error"
    assert finished.error is not None and "dropped" in finished.error
    engine.close()


def test_escape_sequences_never_reach_the_screen(fake: list[FakeServer]) -> None:
    words = ["Hi", "\x1b]52;c;ZXZpbA==\x07", " there", "\x1b[2J", "!"]
    engine = connect_to(start(fake, openai_routes(words=words)))
    tokens, finished = run_reply(engine)
    assert finished.text == "Hi there!"
    assert all("\x1b" not in t.text and "\x07" not in t.text for t in tokens)
    engine.close()


def test_cancel_stops_a_stream_at_once(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes(words=slow_words(200), delay_s=0.05))
    engine = connect_to(server)
    cancel = threading.Event()
    stream = engine.stream_reply(HELLO, SamplingSettings(), cancel)
    first = next(stream)
    cancel.set()
    began = time.monotonic()
    rest = list(stream)
    assert time.monotonic() - began < 1.0
    finished = rest[-1]
    assert finished.stats.finish_reason == "stopped"  # type: ignore[union-attr]
    assert finished.text.startswith(first.text)  # type: ignore[union-attr]
    assert server.stream_closed.wait(5), "the server never saw the client go"
    engine.close()


def test_http_status_error_says_what_the_server_said(fake: list[FakeServer]) -> None:
    from tests.engine.remote.fake_servers import Reply

    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = lambda _: Reply(
        400, {"error": {"message": "This model's maximum context length is 4096 tokens"}}
    )
    engine = connect_to(start(fake, routes))
    with pytest.raises(ServerError, match="maximum context length"):
        run_reply(engine)
    engine.close()
