"""Tool calls through a model server's API, against fakes that speak vLLM's,
Ollama's and a generic OpenAI-compatible server's documented wire formats:
the tools go in the request, the calls come back (in pieces, ids kept), and
earlier calls and results go back in the history."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from chat.engine.protocol import ChatMessage, Finished
from chat.engine.remote.engine import RemoteEngine
from chat.engine.tool_calls.calls import ToolCall
from chat.errors import KvchatError, ServerError
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import HELLO, connect_to, start
from tests.engine.remote.fake_servers import (
    OLLAMA_MODEL,
    FakeServer,
    Reply,
    ollama_routes,
    openai_routes,
    tool_calls_chat,
    vllm_routes,
)
from tests.engine.tool_models import ADD_TOOL, TIME_TOOL

ADD, TIME = ADD_TOOL, TIME_TOOL
TWO_CALLS = [
    ("call_abc123", "add", ['{"a": ', '2, "b"', ": 3}"]),
    ("call_def456", "get_current_time", ['{"timezone": "UTC"}']),
]
EXPECTED = (
    ToolCall("add", {"a": 2, "b": 3}, "call_abc123"),
    ToolCall("get_current_time", {"timezone": "UTC"}, "call_def456"),
)
# A conversation in which the model called a tool and read its result.
HISTORY: list[ChatMessage] = [
    {"role": "user", "content": "Add 2 and 3."},
    {"role": "assistant", "content": "", "tool_calls": [EXPECTED[0].for_template()]},
    {"role": "tool", "content": "5", "tool_call_id": "call_abc123", "name": "add"},
]


def reply_with_tools(engine: RemoteEngine, messages: Any = HELLO) -> Finished:
    events = list(
        engine.stream_reply(messages, SamplingSettings(), threading.Event(), tools=[ADD, TIME])
    )
    finished = events[-1]
    assert isinstance(finished, Finished)
    return finished


def test_vllm_counts_the_tools_and_reads_calls_streamed_in_pieces(
    fake: list[FakeServer],
) -> None:
    routes = vllm_routes()
    routes[("POST", "/v1/chat/completions")] = tool_calls_chat("Let me add.", TWO_CALLS)
    server = start(fake, routes)
    engine = connect_to(server)
    assert engine.info.api_tool_calls and engine.info.calls_tools
    finished = reply_with_tools(engine)
    assert finished.text == "Let me add."
    assert finished.tool_calls == EXPECTED  # the server's ids kept
    assert finished.tool_call_error is None
    # Counted by vLLM's /tokenize with the tools, asked of its chat API with them.
    assert server.last("/tokenize").body["tools"] == [ADD.for_template(), TIME.for_template()]
    sent = server.last("/v1/chat/completions").body
    assert sent["tools"] == [ADD.for_template(), TIME.for_template()]
    assert sent["tool_choice"] == "auto" and sent["messages"] == HELLO
    assert not any(seen.path == "/v1/completions" for seen in server.seen)
    engine.close()


def test_vllm_gets_earlier_calls_and_results_in_openai_shape(fake: list[FakeServer]) -> None:
    routes = vllm_routes()
    routes[("POST", "/v1/chat/completions")] = tool_calls_chat("It is 5.", [])
    server = start(fake, routes)
    engine = connect_to(server)
    finished = reply_with_tools(engine, HISTORY)
    assert finished.text == "It is 5." and finished.tool_calls == ()
    sent = server.last("/v1/chat/completions").body["messages"]
    assert sent[1]["tool_calls"] == [
        {
            "id": "call_abc123",
            "type": "function",
            # OpenAI's shape: the arguments as a JSON string.
            "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})},
        }
    ]
    assert sent[2] == {"role": "tool", "content": "5", "tool_call_id": "call_abc123", "name": "add"}
    assert server.last("/tokenize").body["messages"] == sent
    engine.close()


def test_vllm_without_auto_tool_choice_is_said_in_one_sentence(fake: list[FakeServer]) -> None:
    routes = vllm_routes()
    # vLLM's answer when started without --enable-auto-tool-choice.
    routes[("POST", "/v1/chat/completions")] = lambda _: Reply(
        400,
        {
            "object": "error",
            "message": '"auto" tool choice requires --enable-auto-tool-choice and '
            "--tool-call-parser to be set",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    )
    engine = connect_to(start(fake, routes))
    with pytest.raises(ServerError, match="started without --enable-auto-tool-choice"):
        reply_with_tools(engine)
    engine.close()


def test_openai_server_gets_the_tools_and_its_calls_are_read(fake: list[FakeServer]) -> None:
    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = tool_calls_chat("", TWO_CALLS[:1])
    server = start(fake, routes)
    engine = connect_to(server)
    assert engine.info.calls_tools
    engine.tool_choice = "required"
    finished = reply_with_tools(engine)
    assert finished.tool_calls == EXPECTED[:1] and finished.text == ""
    sent = server.last("/v1/chat/completions").body
    assert sent["tool_choice"] == "required" and len(sent["tools"]) == 2
    # The estimate counts the tools' definitions too.
    assert len(engine.tokenize_chat(HELLO, tools=[ADD, TIME])) > len(engine.tokenize_chat(HELLO))
    engine.close()


def test_a_call_whose_arguments_are_not_an_object_is_said_so(fake: list[FakeServer]) -> None:
    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = tool_calls_chat("", [("c1", "add", ['{"a": 2, '])])
    engine = connect_to(start(fake, routes))
    finished = reply_with_tools(engine)
    assert finished.tool_calls == ()
    assert finished.tool_call_error == "The model's call of 'add' has arguments that are not JSON."
    engine.close()


def test_ollama_takes_tools_and_sends_calls_in_its_message(fake: list[FakeServer]) -> None:
    calls = [{"function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]
    server = start(
        fake, ollama_routes(capabilities=["completion", "tools"], words=[], tool_calls=calls)
    )
    engine = connect_to(server)
    assert engine.info.calls_tools
    finished = reply_with_tools(engine, HISTORY)
    (call,) = finished.tool_calls
    assert (call.name, dict(call.arguments)) == ("add", {"a": 2, "b": 3})
    assert call.id  # Ollama gives none: one is made, for the result to name
    sent = server.last("/api/chat").body
    assert sent["tools"] == [ADD.for_template(), TIME.for_template()]
    assert "tool_choice" not in sent
    # Ollama's shape: the arguments an object, the result naming its tool.
    assert sent["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"a": 2, "b": 3}
    assert sent["messages"][2] == {
        "role": "tool",
        "content": "5",
        "tool_call_id": "call_abc123",
        "tool_name": "add",
    }
    engine.close()


def test_an_ollama_model_without_tools_is_refused_before_any_request(
    fake: list[FakeServer],
) -> None:
    server = start(fake, ollama_routes(capabilities=["completion"]))
    engine = connect_to(server)
    assert not engine.info.calls_tools
    with pytest.raises(KvchatError) as caught:
        reply_with_tools(engine)
    assert str(caught.value) == (
        f"The model {OLLAMA_MODEL} on the Ollama server at {server.url} cannot call tools "
        "(Ollama does not list tools among its capabilities)."
    )
    assert not any(seen.path == "/api/chat" for seen in server.seen)
    engine.close()


def test_a_tool_name_with_escapes_comes_back_clean(fake: list[FakeServer]) -> None:
    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = tool_calls_chat(
        "", [("c1", "add\x1b]8;;http://x\x07\x1b[31m", ['{"a": 1, "b": 2}'])]
    )
    engine = connect_to(start(fake, routes))
    (call,) = reply_with_tools(engine).tool_calls
    assert "\x1b" not in call.name and "\x07" not in call.name
    engine.close()


def test_endless_call_arguments_are_refused(fake: list[FakeServer]) -> None:
    from chat.engine.remote.openai import MAX_CALL_CHARS

    piece = "x" * 60_000
    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = tool_calls_chat(
        "", [("c1", "add", [piece] * (MAX_CALL_CHARS // len(piece) + 2))]
    )
    engine = connect_to(start(fake, routes))
    with pytest.raises(ServerError, match="a tool call of over 1 MiB"):
        reply_with_tools(engine)
    engine.close()
