"""Token counts for servers that cannot count them (Ollama, generic OpenAI
servers): an estimate from the text, corrected by what the server counted.

The estimate is characters over `CHARS_PER_TOKEN` plus a few tokens per
message for the chat template's markers. After each reply the server reports
how many prompt tokens it saw; the ratio of that to the raw estimate of the
same prompt scales later estimates (the latest ratio: the conversation grows,
so the last figure is the most like the next prompt).

`tokenize_chat` must return a list whose length is the count: the ids in it
are placeholders (`PLACEHOLDER_TOKEN_ID`), never sent anywhere.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence

from chat.engine.protocol import ChatMessages
from chat.engine.remote.engine import (
    PLACEHOLDER_TOKEN_ID,
    RemoteEngine,
    Request,
    Summary,
    tool_definitions,
)
from chat.engine.tool_calls.calls import ToolDefinition
from chat.settings.schema import SamplingSettings

CHARS_PER_TOKEN = 4.0
"""English prose in common tokenizers; code and other scripts differ, which
the correction ratio takes up after the first reply."""
TOKENS_PER_MESSAGE = 4
"""A chat template's markers around one message (`<|im_start|>role\\n`...)."""
REPLY_OPENING_TOKENS = 3
"""The generation prompt (`<|im_start|>assistant\\n`)."""
_RATIO_LIMITS = (0.25, 4.0)
"""A reported count this far from the estimate is not a tokenizer's doing
(a template adding a long system prompt, a server counting otherwise): kept
within bounds so that one odd figure cannot make the meter absurd."""


class TokenEstimate:
    def __init__(self) -> None:
        self._ratio = 1.0
        self._lock = threading.Lock()

    @property
    def ratio(self) -> float:
        """Reported prompt tokens over the raw estimate, at the last reply."""
        return self._ratio

    def raw(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[object] = (),
    ) -> float:
        """`tools`: the definitions offered, as they are sent (their JSON is
        counted like text, as templates write it); a reply's calls likewise."""
        chars = sum(len(str(m.get("content", ""))) for m in messages)
        chars += sum(
            len(json.dumps(m["tool_calls"], default=str)) for m in messages if m.get("tool_calls")
        )
        chars += len(json.dumps(list(tools), default=str)) if tools else 0
        markers = TOKENS_PER_MESSAGE * len(messages)
        opening = REPLY_OPENING_TOKENS if add_generation_prompt else 0
        return chars / CHARS_PER_TOKEN + markers + opening

    def count(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[object] = (),
    ) -> int:
        if not messages:
            return 0
        return max(1, math.ceil(self.raw(messages, add_generation_prompt, tools) * self._ratio))

    def tokens(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[object] = (),
    ) -> list[int]:
        """Placeholder ids, as many as the estimate."""
        return [PLACEHOLDER_TOKEN_ID] * self.count(messages, add_generation_prompt, tools)

    def learn(self, messages: ChatMessages, reported: int, tools: Sequence[object] = ()) -> None:
        """The server counted `reported` prompt tokens for `messages` (sent
        with the generation prompt, and `tools`)."""
        raw = self.raw(messages, True, tools)
        if reported > 0 and raw > 0:
            low, high = _RATIO_LIMITS
            with self._lock:
                self._ratio = min(high, max(low, reported / raw))


class EstimatingEngine(RemoteEngine):
    """A server that does not tokenize for clients (Ollama, generic OpenAI-
    compatible ones): counts are `TokenEstimate`s, messages are sent as chat
    messages, and each reply's reported prompt size corrects the estimate.
    Subclasses set `self.estimate = TokenEstimate()` with `info`."""

    estimate: TokenEstimate

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        return self.estimate.tokens(messages, add_generation_prompt, tool_definitions(tools))

    def _prepare(
        self, messages: ChatMessages, sampling: SamplingSettings, tools: Sequence[ToolDefinition]
    ) -> Request:
        # No refusal here on an estimate: the server knows whether it fits.
        tokens = self.tokenize_chat(messages, tools=tools)
        return Request(tokens, self._api_messages(messages), tool_definitions(tools))

    def _reply_done(self, request: Request, summary: Summary) -> None:
        if summary.prompt_tokens is not None:
            self.estimate.learn(request.messages, summary.prompt_tokens, request.tools)
