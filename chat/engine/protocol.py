"""The engine interface and the events a reply streams as.

The UI and the one-shot mode talk to an `Engine` only: the llama.cpp engine
in production, a scripted one in fast UI tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

from chat.conversations.conversation import ReplyStats, TokenChoice
from chat.engine.kv_state import KvState, StateIdentity
from chat.engine.reasoning.markers import Reasoning
from chat.engine.threads import ThreadCounts
from chat.engine.tool_calls.calls import ToolCall, ToolDefinition
from chat.engine.tool_calls.syntax import ToolCallSyntax
from chat.settings.schema import SamplingSettings


class _MessageText(TypedDict):
    role: str
    content: str


class ChatMessage(_MessageText, total=False):
    """One message of a prompt. The chat template sees `role` and `content`,
    and a reply's `reasoning_content` (its thinking, which most reasoning
    templates drop from earlier turns)."""

    reasoning_content: str
    """For a reasoning model's reply: its thinking, apart from `content`."""

    token_ids: Sequence[int]
    """For a reply: the tokens that were sampled (`Finished.token_ids`). The
    prompt then carries these instead of `content` tokenized again, so the KV
    cache that still holds them is reused; used only when they are valid for
    the loaded model and spell `content` exactly."""

    sampled_whole: bool
    """For a reply that thought, sent with its thinking kept (the setting
    `sampling.keep_thinking`): `token_ids` spell the whole reply as sampled,
    markers and thinking included, and go in as they are in place of what the
    template writes for the message (a local model; used only when they end
    with `content`)."""
    tool_calls: Sequence[Mapping[str, object]]
    """For a reply that called tools: the calls, as `ToolCall.for_template()`
    gives them (OpenAI's shape, which chat templates read)."""

    tool_call_id: str
    """For a `tool` message (a call's result): the call's id."""

    name: str
    """For a `tool` message: the tool's name (some templates write it)."""


ChatMessages = Sequence[ChatMessage | Mapping[str, str]]


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
    """Layers offloaded to the GPU (0 on a CPU-only build), counted as llama.cpp
    counts them: the output layer is one more layer, offloaded first."""
    gpu_supported: bool
    """Whether this llama-cpp-python build can offload at all (has a device)."""
    kind: str = "local"
    """"local" (in process), or the server's kind: "llama-server", "vllm",
    "ollama", "openai" (any other OpenAI-compatible server)."""
    server_url: str | None = None
    """The server's base URL, for a model served over HTTP (then `path` is
    `Path(server_url)`, a label, not a file)."""
    n_ctx_source: str = "model"
    """Where `n_ctx` comes from, in words ("llama-server /props", "vLLM
    max_model_len", ...), or why it is assumed."""
    n_ctx_known: bool = True
    """False when the server does not say: `n_ctx` is then an assumption."""
    threads: ThreadCounts | None = None
    """The CPU threads llama.cpp decodes and evaluates prompts with, once
    chosen (None: a model server, or not chosen yet)."""
    count_exact: bool = True
    """Whether `tokenize_chat` counts exactly what the model sees; False where
    the server cannot tokenize (Ollama, generic OpenAI servers): an estimate,
    corrected after each reply from the server's own count."""
    gpu_devices: tuple[str, ...] = ()
    """The devices holding the offloaded layers, named for people
    ("Vulkan0 (llvmpipe)"); empty when none are."""
    gpu_missing: str | None = None
    """Why a build with a GPU backend runs on the CPU ("no Vulkan device
    found"), or None."""
    reasoning: Reasoning | None = None
    """How the model thinks before it answers (its markers, from its chat
    template and vocabulary; chat.engine.reasoning); None when it does not,
    or when a model server sends the thinking in a field of its own."""
    tool_calls: ToolCallSyntax | None = None
    """How the model writes a tool call (from its chat template and
    vocabulary; chat.engine.tool_calls); None when it was not shown how."""
    api_tool_calls: bool = False
    """A model server takes the tools offered and returns the calls through
    its API (OpenAI's `tools` and `tool_calls`, Ollama's): the server writes
    and reads the calls, so `tool_calls` stays None."""
    no_tools_reason: str | None = None
    """Why this model cannot be offered tools, in one sentence, where that is
    known (a llama-server without `--jinja`, a model whose template has no
    tools); None otherwise."""
    continues_replies: bool = True
    """Whether a reply cut short can go on in the same message (Ctrl+L): a
    model in kvchat, or llama-server, which takes a prompt of token ids; a
    chat API always closes the last message."""

    def cannot_continue(self) -> str:
        """Why a reply cut short cannot go on in the same message here
        (`continues_replies` False)."""
        return (
            f"A reply can be continued only with a model loaded in kvchat or on "
            f"llama-server, not on {self.kind}."
        )

    @property
    def calls_tools(self) -> bool:
        """Whether tools can be offered to this model."""
        return self.tool_calls is not None or self.api_tool_calls

    def device_text(self) -> str:
        if self.server_url is not None:
            return f"{self.kind} at {self.server_url}"
        threads = (
            ""
            if self.threads is None
            else f" · threads {self.threads.decode_text()}, {self.threads.batch} prompt"
        )
        if not self.gpu_supported:
            if self.gpu_missing:
                return f"CPU only ({self.gpu_missing}){threads}"
            return f"CPU only (llama-cpp-python built without GPU support){threads}"
        if self.gpu_layers == 0:
            return f"CPU only (GPU layers set to 0){threads}"
        devices = f" · {' + '.join(self.gpu_devices)}" if self.gpu_devices else ""
        # llama.cpp's own count (its log: "offloaded 31/31 layers to GPU").
        return f"GPU: {self.gpu_layers}/{self.n_layers + 1} layers{devices}{threads}"


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token's text, already safe to display (may be "" mid-character)."""

    text: str
    token_id: int
    choice: TokenChoice | None = None
    """The distribution this token was sampled from, when recording and a model
    server sends it with the token (the local engine summarises it off the
    decode thread: its come with `Finished.choices`)."""
    thinking: bool = False
    """The token is the model's thinking, which a model server sent in a field
    of its own (a local model's thinking is found in the text by its markers)."""
    tool_call: bool = False
    """The text is part of a tool call the model writes (its opener, then
    its JSON), not of the reply's text."""


@dataclass(frozen=True)
class Finished:
    """The reply ended; `text` is all of it, `stats` what was measured."""

    text: str
    stats: ReplyStats
    choices: Sequence[TokenChoice] = ()
    """One per generated token, when recording probabilities (a
    `StoredTokenChoices` once the reply's thread has encoded them to be saved)."""
    token_ids: tuple[int, ...] | None = None
    """The sampled tokens that spell `text` exactly (the end-of-turn token and
    a cut-off stop sequence excluded), to send back as `ChatMessage.token_ids`;
    None when no run of them does (text sanitised, a stop sequence or a
    character cut mid-token)."""
    error: str | None = None
    """Why the reply ended early when `stats.finish_reason` is "error" (a
    model server's connection dropped mid-reply): `text` is what came before."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tools the reply called (its arguments sampled under the tool's
    schema); `text` is then what the reply said before the call."""
    tool_call_error: str | None = None
    """Why a call the reply began cannot be read (cut off by max tokens or
    a stop), in one sentence; None otherwise."""


@dataclass(frozen=True)
class PromptProgress:
    """The prompt is being evaluated: `done` of the `total` tokens to evaluate
    (those the KV cache did not hold), `elapsed_s` seconds after evaluation began.
    Sent before the first batch (done 0) and after each, so the last one has
    done == total; an engine that cannot tell sends none."""

    done: int
    total: int
    elapsed_s: float

    @property
    def rate(self) -> float | None:
        """Tokens evaluated per second so far (None before the first batch ends)."""
        return self.done / self.elapsed_s if self.done and self.elapsed_s > 0 else None

    @property
    def seconds_left(self) -> float | None:
        rate = self.rate
        return (self.total - self.done) / rate if rate else None


EngineEvent = TokenEvent | PromptProgress | Finished


class Engine(Protocol):
    info: ModelInfo

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        """Token ids of `messages` rendered with the model's chat template
        (and `tools`, the tools offered, in the template's own words).

        These are exactly the ids `stream_reply` sends, so counts agree.
        """
        ...

    def set_thinking(self, enabled: bool) -> None:
        """A reasoning model thinks (the default) or not, from the next prompt
        on: its chat template is rendered with thinking turned off where it has
        a switch (`Reasoning.switch`; a server is asked to, where its API can),
        which changes the prompt, so `tokenize_chat` counts it so too. Does
        nothing where it cannot (see `Reasoning.enabled`)."""
        ...

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
        continue_last: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> Iterator[EngineEvent]:
        """Generate the assistant's next message: `PromptProgress` while the
        prompt is evaluated (if the engine can tell), `TokenEvent`s, then one
        `Finished`.

        With `record_probs`, each token carries the distribution it was
        sampled from (`TokenChoice`). With `sampling.thinking_budget`, a
        reasoning model's thinking is closed after that many tokens (the
        closing marker's tokens are put in the reply) and the answer follows.
        With `continue_last`, the last message
        is an assistant reply that was cut short (max tokens, Esc): the model
        goes on writing it, and the events carry only the new text.

        With `tools` (for an engine whose `info.tool_calls` is known), the
        template renders them, and a call the model begins is sampled under
        the grammar of their schemas: `Finished.tool_calls` holds it. An
        engine that cannot call tools raises `KvchatError` when given some.

        Setting `cancel` ends the reply after the current token, or while the
        prompt is evaluated after the current batch (then with no tokens; what
        was evaluated stays in the KV cache), with finish reason "stopped".
        Raises `PromptTooLongError` before any event if the prompt does not
        fit, `EngineBusyError` if another reply is being generated (a prefill
        in progress is waited for), `KvchatError` if the engine cannot
        continue a reply.
        """
        ...

    def prefill(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        exact: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> bool:
        """Evaluate the prompt `stream_reply(messages, ...)` would send, ahead of
        time (the user paused over their message). If exactly that is sent next,
        its first token comes at once; the reply is the same either way.

        Without `add_generation_prompt`, `messages` is a conversation about to
        be continued: what of it the next reply would evaluate anyway is
        evaluated now. `exact`: evaluate as a repeatable reply
        (`SamplingSettings.repeatable`) will. `tools`: the tools the reply
        will be offered (`stream_reply`'s), rendered by the template with them.

        Returns False when nothing was done (busy, too long, or not possible).
        """
        ...

    def rebatch_reply(self) -> bool:
        """After a reply, in the background, when replies are repeatable: make
        the KV cache hold what evaluating the conversation from scratch would,
        so that the same seed gives the same next reply whether the cache was
        kept, restored or rebuilt. False when there was nothing to do (or the
        engine has no such difference, as a server)."""
        ...

    def state_identity(self) -> StateIdentity:
        """What a saved KV cache state must have been made for to be restored
        here: this model file's content and the settings that shape the cache."""
        ...

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the KV cache holds now."""
        ...

    def save_state(self, timeout: float = 1.0) -> KvState | None:
        """A copy of what the KV cache holds (its tokens and llama.cpp's state),
        taken between calls. None when it holds nothing, or when a call still
        uses the model after `timeout` seconds. Raises `EngineClosedError`."""
        ...

    def restore_state(self, state: KvState) -> bool:
        """Load `state` into the KV cache in place of what it holds, so that the
        next prompt that starts with `state.tokens` evaluates only the rest. The
        caller checks that the state was made for `state_identity()`. Returns
        False when llama.cpp refuses it (the cache is then empty). Waits for a
        call under way; raises `EngineClosedError`."""
        ...

    def reset(self) -> None:
        """Forget the KV cache, so the next prompt is evaluated from scratch."""
        ...

    def close(self) -> None:
        """Free the model once no call uses it: calls under way end early (a
        reply after its current token), later ones raise `EngineClosedError`."""
        ...
