"""Thinking that servers send in a field of its own, beside the content.
Pure functions over the decoded JSON, for the remote engines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chat.engine.reasoning.splitter import ReplyPart


def openai_chunk_parts(chunk: Mapping[str, Any]) -> list[ReplyPart]:
    """The parts of one OpenAI-style chat completion: a streamed chunk's
    `choices[0].delta`, or a whole reply's `choices[0].message`. The thinking
    is `reasoning_content` (llama-server with `--reasoning-format`, DeepSeek's
    API, vLLM until it renamed it) or `reasoning` (vLLM since, Ollama's /v1,
    OpenRouter); a server sending both (the same text, during vLLM's rename)
    counts once. The text is raw server output, to be sanitised as the
    content is (each field with its own sanitiser: an escape may be split
    across chunks)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    choice = choices[0]
    body = choice.get("delta", choice.get("message"))
    if not isinstance(body, dict):
        return []
    return _parts(openai_thinking(body), _text(body.get("content")))


def openai_thinking(body: Mapping[str, Any]) -> str:
    """The thinking of one OpenAI-style delta or message (see `openai_chunk_parts`)."""
    return _text(body.get("reasoning_content")) or _text(body.get("reasoning"))


def ollama_chunk_parts(chunk: Mapping[str, Any]) -> list[ReplyPart]:
    """The parts of one line of Ollama's native stream (or its whole reply):
    /api/chat's `message.thinking` and `message.content`, /api/generate's
    `thinking` and `response` (thinking sent when the request's `think` is on)."""
    message = chunk.get("message")
    if isinstance(message, dict):
        return _parts(_text(message.get("thinking")), _text(message.get("content")))
    return _parts(_text(chunk.get("thinking")), _text(chunk.get("response")))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _parts(thinking: str, answer: str) -> list[ReplyPart]:
    parts = []
    if thinking:
        parts.append(ReplyPart("thinking", thinking))
    if answer:
        parts.append(ReplyPart("answer", answer))
    return parts
