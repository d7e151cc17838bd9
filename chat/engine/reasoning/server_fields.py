"""Thinking that servers send in a field of its own, beside the content.
Pure functions over the decoded JSON, for the remote engines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chat.engine.reasoning.splitter import ReplyPart


def openai_chunk_parts(chunk: Mapping[str, Any]) -> list[ReplyPart]:
    """The parts of one OpenAI-style chat completion: a streamed chunk's
    `choices[0].delta`, or a whole reply's `choices[0].message`. The thinking
    is `reasoning_content` (llama-server with `--reasoning-format`, vLLM
    before 0.10) or `reasoning` (vLLM since, Ollama's /v1); the text is raw
    server output, to be sanitised as the content is."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    choice = choices[0]
    body = choice.get("delta", choice.get("message"))
    if not isinstance(body, dict):
        return []
    thinking = _text(body.get("reasoning_content")) or _text(body.get("reasoning"))
    return _parts(thinking, _text(body.get("content")))


def ollama_chunk_parts(chunk: Mapping[str, Any]) -> list[ReplyPart]:
    """The parts of one line of Ollama's /api/chat stream (or its whole
    reply): `message.thinking` (with `think` on) and `message.content`."""
    message = chunk.get("message")
    if not isinstance(message, dict):
        return []
    return _parts(_text(message.get("thinking")), _text(message.get("content")))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _parts(thinking: str, answer: str) -> list[ReplyPart]:
    parts = []
    if thinking:
        parts.append(ReplyPart("thinking", thinking))
    if answer:
        parts.append(ReplyPart("answer", answer))
    return parts
