"""Servers on loopback that answer what no model server should (issue 27):
escapes in model names, credentials in the URL, redirects, bytes that are not
HTTP, windows no model has, `true` where a number goes. What kvchat shows of
them is one safe line; a password never leaves the Authorization header."""

from __future__ import annotations

import base64
import json

import pytest

from chat.engine.remote import ServerConfig, connect
from chat.engine.remote.engine import MAX_N_CTX
from chat.engine.remote.openai import ASSUMED_N_CTX
from chat.errors import ServerError, ServerUnreachableError, UnknownServerModelError
from chat.sanitize import sanitize_line
from tests.engine.remote.conftest import connect_to, run_reply, start
from tests.engine.remote.fake_servers import (
    OLLAMA_MODEL,
    FakeServer,
    RawServer,
    Reply,
    llama_server_routes,
    ollama_routes,
    openai_routes,
    sse,
    vllm_routes,
)
from tests.servers import free_port

CANARY = "\x1b]0;pwned\x07\x1b[2J\u202eevil\x9b31m"
"""A terminal title, a screen clear, a bidi override and a C1 CSI."""


def assert_clean(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\u202e\x9b"), repr(text)


# -- escapes in what a server names ---------------------------------------------------------


def test_a_model_name_with_escapes_is_shown_as_one_clean_line(fake: list[FakeServer]) -> None:
    name = f"bad{CANARY}\nmodel"
    server = start(fake, openai_routes(model_entry={"id": name, "object": "model"}))
    engine = connect_to(server)
    assert_clean(engine.info.name)
    assert engine.info.name == sanitize_line(name) and "evil" in engine.info.name
    # Requests use the server's own spelling of it.
    run_reply(engine)
    assert server.last("/v1/chat/completions").body["model"] == name
    engine.close()


def test_the_models_listed_in_does_not_serve_are_clean(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes(model_entry={"id": f"x{CANARY}", "object": "model"}))
    with pytest.raises(UnknownServerModelError) as caught:
        connect_to(server, model="wanted")
    assert_clean(str(caught.value))
    assert all("\x1b" not in m for m in caught.value.models)
    assert "evil" in str(caught.value)


def test_a_llama_server_alias_with_escapes_is_clean(fake: list[FakeServer]) -> None:
    props = {"default_generation_settings": {"n_ctx": 4096}, "model_alias": f"a{CANARY}"}
    server = start(fake, llama_server_routes(props))
    engine = connect_to(server)
    assert engine.info.kind == "llama-server"
    assert_clean(engine.info.name)
    engine.close()
    with pytest.raises(UnknownServerModelError) as caught:
        connect_to(server, model="other")
    assert_clean(str(caught.value))


def test_a_server_error_message_with_escapes_is_clean(fake: list[FakeServer]) -> None:
    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = lambda _: Reply(500, {"error": CANARY})
    engine = connect_to(start(fake, routes))
    with pytest.raises(ServerError) as caught:
        run_reply(engine)
    assert_clean(str(caught.value))
    assert "500" in str(caught.value)
    engine.close()


# -- credentials in the URL -------------------------------------------------------------------


def test_credentials_in_the_url_go_as_basic_auth_and_nowhere_else(
    fake: list[FakeServer],
) -> None:
    server = start(fake, openai_routes())
    host = server.url.removeprefix("http://")
    config = ServerConfig(f"http://me:s3cr%40t@{host}/v1")
    assert config.url == f"http://{host}/v1" and config.auth == ("me", "s3cr@t")
    assert "s3cr" not in repr(config) and "me:" not in config.display_name()
    engine = connect(config)
    run_reply(engine)
    expected = "Basic " + base64.b64encode(b"me:s3cr@t").decode()
    assert {seen.headers["Authorization"] for seen in server.seen} == {expected}
    shown = [engine.info.server_url, engine.info.device_text(), str(engine.info.path)]
    shown.append(repr(engine))
    assert not any("s3cr" in text or "me@" in text or "me:" in text for text in shown), shown
    engine.close()


def test_an_api_key_wins_over_url_credentials(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes(), api_key="sk-key")
    host = server.url.removeprefix("http://")
    engine = connect(ServerConfig(f"http://me:pw@{host}", api_key="sk-key"))
    assert server.seen[-1].headers["Authorization"] == "Bearer sk-key"
    engine.close()


def test_an_error_never_names_the_password(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes())
    host = server.url.removeprefix("http://")
    with pytest.raises(UnknownServerModelError) as caught:
        connect(ServerConfig(f"http://me:hunter2@{host}", model="nope"))
    assert "hunter2" not in str(caught.value) and host in str(caught.value)
    port = free_port()
    with pytest.raises(ServerUnreachableError) as down:
        connect(ServerConfig(f"http://me:hunter2@127.0.0.1:{port}", connect_timeout_s=2))
    assert "hunter2" not in str(down.value) and f"127.0.0.1:{port}" in str(down.value)


# -- redirects, garbage, silence ----------------------------------------------------------------


def test_a_redirect_is_reported_and_not_followed(fake: list[FakeServer]) -> None:
    target = start(fake, openai_routes())
    elsewhere = target.url.replace("http://", "http://eve:pw@") + "/v1?token=abc"
    redirect = {"Location": elsewhere}  # (h11 refuses a header holding controls)
    routes = {
        (method, path): (lambda _: Reply(302, {}, redirect))
        for method, path in [("GET", "/props"), ("GET", "/v1/models"), ("GET", "/api/version")]
    }
    server = start(fake, routes)
    with pytest.raises(ServerError) as caught:
        connect_to(server, api_key="sk-key")
    message = str(caught.value)
    assert "redirect (302)" in message and "does not follow" in message, message
    assert f"to {target.url}/v1," in message, message
    assert "pw" not in message and "abc" not in message and "eve" not in message
    assert_clean(message)
    assert target.seen == []  # neither the key nor anything else went there


@pytest.mark.parametrize(
    "answer", [b"garbage\r\n\r\n", CANARY.encode() + b"\r\n\r\n", b"\x00\xff binary\r\n\r\n"]
)
def test_an_answer_that_is_not_http_is_not_called_unreachable(answer: bytes) -> None:
    raw = RawServer(answer)
    url = raw.url
    try:
        with pytest.raises(ServerError) as caught:
            connect(ServerConfig(raw.url, connect_timeout_s=2, read_timeout_s=5))
    finally:
        raw.stop()
    message = str(caught.value)
    assert not isinstance(caught.value, ServerUnreachableError), message
    assert "not HTTP" in message and url in message
    assert "Nothing answers" not in message and "running" not in message
    assert_clean(message)


def test_a_server_that_hangs_up_at_once_says_so() -> None:
    raw = RawServer(b"")
    try:
        with pytest.raises(ServerUnreachableError) as caught:
            connect(ServerConfig(raw.url, connect_timeout_s=2, read_timeout_s=5))
    finally:
        raw.stop()
    assert "closed it without answering" in str(caught.value)


def test_nothing_listening_is_the_only_nothing_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnreachableError, match="Nothing answers at"):
        connect(ServerConfig(url, connect_timeout_s=2))


def test_json_garbage_says_what_came(fake: list[FakeServer]) -> None:
    routes = {("GET", "/v1/models"): lambda _: Reply(200, "not a list")}
    with pytest.raises(ServerError, match="serves no model"):
        connect_to(start(fake, routes), kind="openai")


# -- windows and numbers ----------------------------------------------------------------------


@pytest.mark.parametrize("window", [10**12, True, -5, 0, 4096.0, "8192", MAX_N_CTX + 1])
def test_a_window_no_model_has_is_unknown_with_a_note(
    fake: list[FakeServer], window: object
) -> None:
    entry = {"id": "m", "object": "model", "max_model_len": window}
    engine = connect_to(start(fake, openai_routes(model_entry=entry)), kind="openai")
    info = engine.info
    assert (info.n_ctx, info.n_ctx_known) == (ASSUMED_N_CTX, False)
    assert "not a window" in info.n_ctx_source, info.n_ctx_source
    engine.close()


def test_the_largest_sane_window_is_taken(fake: list[FakeServer]) -> None:
    entry = {"id": "m", "object": "model", "max_model_len": MAX_N_CTX}
    engine = connect_to(start(fake, openai_routes(model_entry=entry)), kind="openai")
    assert (engine.info.n_ctx, engine.info.n_ctx_known) == (MAX_N_CTX, True)
    engine.close()


@pytest.mark.parametrize("n_ctx", [10**12, True])
def test_a_llama_server_window_no_slot_has_is_unknown(
    fake: list[FakeServer], n_ctx: object
) -> None:
    props = {"default_generation_settings": {"n_ctx": n_ctx}, "model_path": "/m/demo.gguf"}
    engine = connect_to(start(fake, llama_server_routes(props)))
    assert (engine.info.n_ctx, engine.info.n_ctx_known) == (ASSUMED_N_CTX, False)
    assert engine.info.n_ctx_train == ASSUMED_N_CTX
    engine.close()


def test_an_ollama_num_ctx_no_model_has_is_not_taken(fake: list[FakeServer]) -> None:
    routes = ollama_routes(num_ctx=10**12)
    engine = connect_to(start(fake, routes), model=OLLAMA_MODEL)
    assert engine.info.n_ctx <= MAX_N_CTX
    engine.close()


@pytest.mark.parametrize("bad", [True, 2**70, 10**400], ids=["true", "past-64-bits", "400-digits"])
def test_true_is_never_a_count_or_a_probability(fake: list[FakeServer], bad: object) -> None:
    # A count past 64 bits was taken, and failed the reply's save (SQLite).
    def chat(body: object) -> object:
        from tests.engine.remote.fake_servers import Stream

        choice = {
            "index": 0,
            "delta": {"content": "Hi"},
            "finish_reason": "stop",
            "logprobs": {"content": [{"token": "Hi", "logprob": True, "top_logprobs": []}]},
        }
        usage = {"prompt_tokens": bad, "completion_tokens": bad}
        return Stream(sse([{"choices": [choice]}, {"choices": [], "usage": usage}]))

    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = chat
    engine = connect_to(start(fake, routes), kind="openai")
    estimate = len(engine.tokenize_chat([{"role": "user", "content": "Say hello to my friend."}]))
    tokens, finished = run_reply(engine, record_probs=True)
    assert finished.text == "Hi"
    assert finished.stats.prompt_tokens == estimate != 1
    assert finished.stats.generated_tokens == 1  # counted here, not the server's `true`
    assert tokens[0].choice is not None and tokens[0].choice.raw_prob == 0.0
    engine.close()


@pytest.mark.parametrize("rate", [True, 10**400], ids=["true", "400-digits"])
def test_true_is_not_a_llama_server_timing(fake: list[FakeServer], rate: object) -> None:
    # A rate of 400 digits (Python's json reads an integer of any length)
    # overflowed float(): the reply failed on its last event.
    from chat.engine.remote.engine import Summary
    from chat.engine.remote.llama_server import _read_timings

    summary = Summary()
    event = {"timings": {"prompt_n": True, "cache_n": 3, "predicted_n": 5}}
    event["timings"]["predicted_per_second"] = rate
    _read_timings(json.loads(json.dumps(event)), summary)
    assert summary.prompt_tokens is None and summary.decode_tps is None


def test_a_model_list_too_big_to_be_one_is_refused(fake: list[FakeServer]) -> None:
    from chat.engine.remote.http import MAX_JSON_BYTES

    entries = [{"id": "m" * 1000, "object": "model"}] * (MAX_JSON_BYTES // 1000)
    routes = {("GET", "/v1/models"): lambda _: Reply(body={"data": entries})}
    with pytest.raises(ServerError, match="over 16 MiB; kvchat stopped reading"):
        connect_to(start(fake, routes), kind="openai")


def test_an_error_page_is_shown_short_and_clean(fake: list[FakeServer]) -> None:
    page = "<html>" + CANARY * 10_000 + "</html>"
    routes = {("GET", "/v1/models"): lambda _: Reply(502, page.encode())}
    with pytest.raises(ServerError) as caught:
        connect_to(start(fake, routes), kind="openai")
    message = str(caught.value)
    assert "502: <html>" in message and "evil" in message and len(message) < 500
    assert_clean(message)


# -- token ids no vocabulary has ------------------------------------------------------------


@pytest.mark.parametrize("third", [7, 2**40])
def test_a_reply_with_a_token_id_past_32_bits_keeps_no_ids(
    fake: list[FakeServer], third: int
) -> None:
    # Each chunk of vLLM's stream says its token's id; ids are saved as 32-bit
    # integers, so a reply with one past that is kept without its ids.
    def with_ids(lines: list[bytes]) -> list[bytes]:
        events = [json.loads(line[len(b"data: ") :]) for line in lines[:-1]]
        for number, event in enumerate(events):
            for choice in event["choices"]:
                choice["token_ids"] = [third if number == 2 else number + 5]
        return sse(events)

    engine = connect_to(start(fake, vllm_routes(stream_lines=with_ids)))
    _, finished = run_reply(engine)
    assert finished.text == "Hello there, friend."
    assert finished.token_ids == (None if third > 2**31 else (5, 6, 7, 8, 9))
    engine.close()
