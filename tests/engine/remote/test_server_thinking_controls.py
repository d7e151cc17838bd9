"""Thinking off on model servers (issue 29 point 4): each kind asks as its
API documents it, or says it cannot (`ignored_settings`, which the settings
pane marks). Against the fake servers (tests/engine/remote/fake_servers.py)."""

from __future__ import annotations

import threading

import pytest

from chat.errors import KvchatError
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import HELLO, connect_to, run_reply, start
from tests.engine.remote.fake_servers import (
    FakeServer,
    ollama_routes,
    openai_routes,
    vllm_routes,
)


def test_vllm_renders_the_prompt_with_the_templates_switch_off(fake: list[FakeServer]) -> None:
    server = start(fake, vllm_routes())
    engine = connect_to(server)
    engine.tokenize_chat(HELLO)
    assert "chat_template_kwargs" not in server.last("/tokenize").body
    engine.set_thinking(False)
    engine.tokenize_chat(HELLO)
    assert server.last("/tokenize").body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "thinking_budget" in engine.ignored_settings
    assert "thinking" not in engine.ignored_settings
    engine.close()


def test_ollama_is_asked_not_to_think(fake: list[FakeServer]) -> None:
    server = start(fake, ollama_routes())
    engine = connect_to(server)
    run_reply(engine, sampling=SamplingSettings(max_tokens=5))
    # On (the default) is not sent: for a model that cannot think it is an error.
    assert "think" not in server.last("/api/chat").body
    engine.set_thinking(False)
    run_reply(engine, sampling=SamplingSettings(max_tokens=5))
    assert server.last("/api/chat").body["think"] is False
    assert "thinking_budget" in engine.ignored_settings
    engine.close()


def test_a_generic_openai_server_ignores_both(fake: list[FakeServer]) -> None:
    server = start(fake, openai_routes())
    engine = connect_to(server)
    assert {"thinking", "thinking_budget"} <= engine.ignored_settings
    engine.close()


def test_a_chat_api_server_cannot_continue_a_reply(fake: list[FakeServer]) -> None:
    """Only llama-server takes the reply so far as a prompt of token ids
    (tests/engine/remote/test_llama_server_thinking.py); a chat API closes
    the last message, and kvchat says so in a sentence."""
    for routes in (vllm_routes(), ollama_routes(), openai_routes()):
        engine = connect_to(start(fake, routes))
        cut = [*HELLO, {"role": "assistant", "content": "Hel"}]
        stop = threading.Event()
        going_on = engine.stream_reply(cut, SamplingSettings(), stop, continue_last=True)
        with pytest.raises(KvchatError, match="llama-server, not on"):
            list(going_on)
        engine.close()
