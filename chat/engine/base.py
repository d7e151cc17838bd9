"""The engine interface and the events a reply streams as.

The UI and the one-shot mode talk to an `Engine` only: the llama.cpp engine
in production, a scripted one in fast UI tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from chat.conversations.conversation import ReplyStats, TokenChoice
from chat.settings.schema import SamplingSettings

ChatMessages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class ModelInfo:
    """What the status bar and the context meter need to know about the loaded model."""

    path: Path
    name: str
    n_ctx: int
    """The context window actually allocated, in tokens."""
    n_ctx_train: int
    n_layers: int
    gpu_layers: int
    """Layers offloaded to the GPU (0 on a CPU-only build)."""
    gpu_supported: bool
    """Whether this llama-cpp-python build can offload at all."""

    def device_text(self) -> str:
        if not self.gpu_supported:
            return "CPU only (llama-cpp-python built without GPU support)"
        if self.gpu_layers == 0:
            return "CPU only (GPU layers set to 0)"
        return f"GPU: {self.gpu_layers}/{self.n_layers} layers"


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token's text, already safe to display (may be "" mid-character)."""

    text: str
    token_id: int
    choice: TokenChoice | None = None
    """The distribution this token was sampled from, when recording."""


@dataclass(frozen=True)
class Finished:
    """The reply ended; `text` is all of it, `stats` what was measured."""

    text: str
    stats: ReplyStats
    choices: tuple[TokenChoice, ...] = ()
    """One per generated token, when recording probabilities."""


EngineEvent = TokenEvent | Finished


class Engine(Protocol):
    info: ModelInfo

    def tokenize_chat(
        self, messages: ChatMessages, add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of `messages` rendered with the model's chat template.

        These are exactly the ids `stream_reply` sends, so counts agree.
        """
        ...

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
    ) -> Iterator[EngineEvent]:
        """Generate the assistant's next message: `TokenEvent`s, then one `Finished`.

        With `record_probs`, each token carries the distribution it was
        sampled from (`TokenChoice`).

        Setting `cancel` ends the reply after the current token, with finish
        reason "stopped". Raises `PromptTooLongError` before any event if the
        prompt does not fit, `EngineBusyError` if another reply is being
        generated (a prefill in progress is waited for).
        """
        ...

    def prefill(self, messages: ChatMessages, add_generation_prompt: bool = True) -> bool:
        """Evaluate the prompt `stream_reply(messages, ...)` would send, ahead of
        time (the user paused over their message). If exactly that is sent next,
        its first token comes at once; the reply is the same either way.

        Without `add_generation_prompt`, `messages` is a conversation about to
        be continued: what of it the next reply would evaluate anyway is
        evaluated now.

        Returns False when nothing was done (busy, too long, or not possible).
        """
        ...

    def reset(self) -> None:
        """Forget the KV cache, so the next prompt is evaluated from scratch."""
        ...

    def close(self) -> None:
        """Free the model once no call uses it: calls under way end early (a
        reply after its current token), later ones raise `EngineClosedError`."""
        ...
