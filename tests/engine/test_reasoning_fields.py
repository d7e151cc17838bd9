"""The thinking that servers send beside the content, read from the JSON
shapes they document (llama-server's shape as measured on the real server
in test_reasoning.py)."""

from __future__ import annotations

from typing import Any

import pytest

from chat.engine.reasoning.server_fields import ollama_chunk_parts, openai_chunk_parts
from chat.engine.reasoning.splitter import ReplyPart


def delta(**fields: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": fields, "finish_reason": None}],
    }


def test_llama_server_and_deepseek_reasoning_content() -> None:
    thinking = delta(reasoning_content="Let me")
    assert openai_chunk_parts(thinking) == [ReplyPart("thinking", "Let me")]
    assert openai_chunk_parts(delta(content="Four.")) == [ReplyPart("answer", "Four.")]
    # The first chunk names the role and has no text yet.
    assert openai_chunk_parts(delta(role="assistant", content=None)) == []


def test_vllm_reasoning_old_and_new_names() -> None:
    assert openai_chunk_parts(delta(reasoning="Hmm")) == [ReplyPart("thinking", "Hmm")]
    # During the rename a server may send both: the thinking counts once.
    both = delta(reasoning="Hmm", reasoning_content="Hmm")
    assert openai_chunk_parts(both) == [ReplyPart("thinking", "Hmm")]


def test_a_whole_reply_not_streamed() -> None:
    whole = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "reasoning_content": "9.8 wins", "content": "9.8"},
                "finish_reason": "stop",
            }
        ]
    }
    parts = [ReplyPart("thinking", "9.8 wins"), ReplyPart("answer", "9.8")]
    assert openai_chunk_parts(whole) == parts


def test_ollama_native_chat_and_generate() -> None:
    thinking = {
        "model": "qwen3",
        "created_at": "2025-05-29T09:35:56.836222Z",
        "message": {"role": "assistant", "content": "", "thinking": "Okay"},
        "done": False,
    }
    assert ollama_chunk_parts(thinking) == [ReplyPart("thinking", "Okay")]
    answer = {"model": "qwen3", "message": {"role": "assistant", "content": "Hi"}, "done": False}
    assert ollama_chunk_parts(answer) == [ReplyPart("answer", "Hi")]
    last = {"model": "qwen3", "message": {"role": "assistant", "content": ""}, "done": True}
    assert ollama_chunk_parts(last) == []
    generated = {"model": "qwen3", "thinking": "So", "response": "", "done": False}
    assert ollama_chunk_parts(generated) == [ReplyPart("thinking", "So")]


@pytest.mark.parametrize(
    "chunk",
    [
        {},
        {"choices": []},
        {"choices": "x"},
        {"choices": [None]},
        {"choices": [{"delta": "text"}]},
        {"choices": [{"delta": {"reasoning_content": 3, "content": ["a"]}}]},
        {"error": {"message": "boom"}},
    ],
)
def test_shapes_no_server_documents_give_nothing(chunk: dict[str, Any]) -> None:
    assert openai_chunk_parts(chunk) == []
    assert ollama_chunk_parts({"message": chunk.get("choices")}) == []
