"""What every remote engine shares: one reply at a time, the reply's text made
safe and timed, faults turned into what the caller can keep, and the KV-cache
methods of `Engine` answered for a cache the server owns.

A kind (llama-server, vLLM, Ollama, OpenAI) supplies `_prepare` (the request
for a conversation, tokenized or estimated) and `_pieces` (the server's stream
as `Piece`s, then one `Summary`, which carries the tools the reply called).

Tools go through the server's API: the definitions in the request, the calls
read from the stream (`Summary.tool_calls`, then `Finished.tool_calls`), and
earlier calls and results in the history as `tool_calls` and `tool` messages
(`chat_messages`). A kind that cannot says why in `ModelInfo.no_tools_reason`.

How a reply that fails part-way ends: when the connection drops (or the server
sends something broken) *after* text has come, the events already yielded
stand and the stream ends with a `Finished` whose finish reason is "error"
and whose `error` says why, so the caller keeps and saves the partial text.
Before any text, the `ServerError` is raised (there is nothing to keep).
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat.conversations.conversation import FinishReason, ReplyStats, TokenChoice
from chat.engine.kv_state import KvState, StateIdentity
from chat.engine.protocol import (
    ChatMessages,
    EngineEvent,
    Finished,
    ModelInfo,
    PromptProgress,
    TokenEvent,
)
from chat.engine.remote.http import ServerHttp
from chat.engine.reply_text import ReplyText
from chat.engine.tool_calls.calls import ToolCall, ToolDefinition
from chat.errors import (
    EngineBusyError,
    EngineClosedError,
    KvchatError,
    PromptTooLongError,
    ServerError,
)
from chat.json_numbers import is_token_id
from chat.sanitize import sanitize_line
from chat.settings.schema import SamplingSettings

PREFILL_WAIT_S = 60.0
"""A reply sent while its prompt is being prefilled waits this long at most."""
_CANCEL_POLL_S = 0.05
"""How often a reply waiting for a prefill looks at its `cancel`."""
MAX_N_CTX = 1 << 24
"""The largest context window a server's word is taken for: far above any
model's, below figures that only a broken or hostile server sends."""
MAX_NAME_CHARS = 200
"""A served model's name is cut to this for showing (the status bar, errors)."""
PLACEHOLDER_TOKEN_ID = 0
"""Stands for a token whose id the server does not report (see `Piece`)."""


_NO_SERVER_TOOLS = "This model server cannot call tools."


@dataclass(frozen=True)
class Piece:
    """One streamed token: its text as the server sent it (untrusted), its id
    (`PLACEHOLDER_TOKEN_ID` when the server does not say; `known_id` False),
    and its probabilities when recorded."""

    text: str
    token_id: int = PLACEHOLDER_TOKEN_ID
    known_id: bool = False
    choice: TokenChoice | None = None
    thinking: bool = False
    """The server sent it as the model's thinking, in a field of its own."""


@dataclass
class Summary:
    """The server's own figures for a reply, as far as it gives them."""

    finish: FinishReason = "done"
    prompt_tokens: int | None = None
    prompt_evaluated: int | None = None
    generated_tokens: int | None = None
    decode_tps: float | None = None
    seed: int | None = None
    clean_ids: bool = True
    """False when the sampled ids may not spell the text (a stop word cut it)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tools the reply called, as the server read them from its output."""
    tool_call_error: str | None = None
    """Why a call the server reported cannot be used, in one sentence."""


@dataclass(frozen=True)
class Request:
    """A reply's prompt: the token ids counted (and, where the server takes
    them, sent), and whatever the kind sends instead or besides."""

    tokens: list[int]
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Each message as a chat API takes it (`chat_messages`), for servers
    that take messages."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The tools offered, in OpenAI's shape (`ToolDefinition.for_template`)."""


@dataclass(frozen=True)
class ReplyCall:
    """One reply asked of a server: its prompt, how to sample it, the event
    that stops it, and whether each token's probabilities are recorded."""

    request: Request
    sampling: SamplingSettings
    cancel: threading.Event
    record_probs: bool


def server_model_info(
    http: ServerHttp,
    name: str,
    kind: str,
    n_ctx: int,
    n_ctx_source: str,
    *,
    n_ctx_train: int | None = None,
    n_ctx_known: bool = True,
    count_exact: bool = True,
    api_tool_calls: bool = False,
    no_tools_reason: str | None = None,
    continues_replies: bool = False,
) -> ModelInfo:
    """What the status bar and the meter show of a served model: its window
    (and where that figure came from); no layers or GPU figures of ours. The
    name is the server's word: made one safe line here, for every place that
    shows or records it (requests use the server's own spelling)."""
    return ModelInfo(
        path=Path(http.url),
        name=sanitize_line(name)[:MAX_NAME_CHARS] or "unnamed model",
        n_ctx=n_ctx,
        n_ctx_train=window_size(n_ctx_train) or n_ctx,
        n_layers=0,
        gpu_layers=0,
        gpu_supported=False,
        kind=kind,
        server_url=http.url,
        n_ctx_source=n_ctx_source,
        n_ctx_known=n_ctx_known,
        count_exact=count_exact,
        api_tool_calls=api_tool_calls,
        no_tools_reason=no_tools_reason,
        continues_replies=continues_replies,
    )


def window_size(value: object) -> int | None:
    """A context window as a server reports it, if it is one: a whole number
    (a JSON `true` is not one) from 1 to `MAX_N_CTX`."""
    if type(value) is int and 0 < value <= MAX_N_CTX:
        return value
    return None


def out_of_bounds_note(value: object) -> str:
    """Why a reported window was not taken, for `ModelInfo.n_ctx_source`."""
    shown = sanitize_line(repr(value))[:40]
    return f"the server reported {shown}, not a window of 1 to {MAX_N_CTX:,} tokens"


def shown_names(names: Sequence[str]) -> list[str]:
    """Served model names as they may be shown: one safe line each."""
    return [sanitize_line(name)[:MAX_NAME_CHARS] for name in names]


def exact_request(tokens: list[int], n_ctx: int) -> Request:
    """A prompt counted by the server's own tokenizer, refused here when it
    cannot fit the window (as the local engine refuses it)."""
    if len(tokens) >= n_ctx:
        raise PromptTooLongError(
            f"The prompt is {len(tokens):,} tokens but the server's context window holds "
            f"{n_ctx:,}. Shorten the message or start a new conversation."
        )
    return Request(tokens)


def chat_messages(messages: ChatMessages, arguments_as_text: bool = True) -> list[dict[str, Any]]:
    """What a server's chat template is given: role and content, a reply's
    tool calls (`tool_calls`, OpenAI's shape: the arguments a JSON string, or
    the object itself when not `arguments_as_text`, as Ollama takes them) and
    a result's call id and tool name."""
    shown: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": str(message["role"]), "content": str(message["content"])}
        calls = message.get("tool_calls")
        if isinstance(calls, (list, tuple)) and calls:
            item["tool_calls"] = [_api_call(call, arguments_as_text) for call in calls]
        if item["role"] == "tool":
            for key in ("tool_call_id", "name"):
                value = message.get(key)
                if isinstance(value, str):
                    item[key] = value
        shown.append(item)
    return shown


def tool_definitions(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """The tools offered as chat APIs take them (OpenAI's shape)."""
    return [tool.for_template() for tool in tools]


def _api_call(call: Any, arguments_as_text: bool) -> dict[str, Any]:
    """One call of a reply (`ToolCall.for_template`'s shape) as an API takes it."""
    function = call.get("function", {}) if isinstance(call, dict) else {}
    arguments = function.get("arguments", {})
    if arguments_as_text and not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": str(call.get("id", "")),
        "type": "function",
        "function": {"name": str(function.get("name", "")), "arguments": arguments},
    }


def served_models(models: Any) -> list[dict[str, Any]]:
    """The entries of a `/v1/models` answer (OpenAI's shape) that name a model."""
    entries = models.get("data") if isinstance(models, dict) else None
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]


def remote_state_identity(info: ModelInfo) -> StateIdentity:
    """Never equal to a local model's identity (size 0, hash naming the server):
    a KV state saved for a local model is never offered to a server's, or back."""
    return StateIdentity(
        model_size=0,
        model_hash=f"remote:{info.kind}:{info.server_url}:{info.name}",
        n_ctx=info.n_ctx,
        type_k=-1,
        type_v=-1,
        gpu_layers=0,
        flash_attn=False,
        offload_kqv=False,
        swa_full=False,
        library="remote",
        gpu_build=False,
    )


class RemoteEngine:
    """An `Engine` whose model runs in a server. Subclasses set `info` and
    implement `tokenize_chat`, `_prepare` and `_pieces`."""

    info: ModelInfo
    ignored_settings: frozenset[str] = frozenset()
    """Names of `SamplingSettings` fields this kind of server does not take
    (the settings pane marks them)."""
    probs_note: str | None = None
    """None when token probabilities can be recorded; else why not, in words.
    Where they can, they are the model's own distribution (before the sampling
    settings): `TokenChoice.prob`/`top` then repeat `raw_prob`/`raw_top`,
    except at temperature 0, where the choice is certain."""

    def __init__(self, http: ServerHttp) -> None:
        self._http = http
        self.tool_choice: str = "auto"
        """What the server is asked to do with the tools offered (OpenAI's
        `tool_choice`): "auto" lets the model choose; "required" makes it
        call one (the tests ask for it: the demo model never calls alone)."""
        self.thinking = True
        """Whether a reasoning model thinks (`set_thinking`); each kind of
        server asks for it its own way, or cannot (then `ignored_settings`
        names "thinking")."""
        self._lock = threading.Lock()
        self._prefilling = False
        self._stop_prefill = threading.Event()
        """Set, the prefill's request ends (its connection shut down)."""
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._http.url!r}, model={self.info.name!r})"

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        raise NotImplementedError

    def set_thinking(self, enabled: bool) -> None:
        self.thinking = enabled

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
        continue_last: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> Iterator[EngineEvent]:
        if tools and not self.info.api_tool_calls:
            raise KvchatError(self.info.no_tools_reason or _NO_SERVER_TOOLS)
        started = time.perf_counter()
        self._acquire_for_reply(cancel)
        try:
            if continue_last:
                request = self._prepare_continuation(messages)
            else:
                request = self._prepare(messages, sampling, tools)
            if cancel.is_set():  # Esc while a prefill was waited for: nothing is sent
                yield _stopped_unsent(request, sampling, started)
                return
            yield from self._run(request, sampling, cancel, record_probs, started)
        finally:
            self._lock.release()

    def _acquire_for_reply(self, cancel: threading.Event) -> None:
        """The engine for a reply. A prefill under way is waited for (it
        reads the reply's prompt, or most of it, into the server's cache);
        `cancel` set meanwhile (Esc) ends the prefill's request, so that the
        server stops reading at once rather than after the whole prompt."""
        if not self._lock.acquire(blocking=False) and not (
            self._prefilling and self._wait_for_prefill(cancel)
        ):
            raise EngineBusyError(
                "A reply is already being generated; wait for it or press Escape."
            )
        if self._closed:
            self._lock.release()
            raise EngineClosedError("The server connection was closed.")

    def _wait_for_prefill(self, cancel: threading.Event) -> bool:
        deadline = time.monotonic() + PREFILL_WAIT_S
        while not self._lock.acquire(timeout=_CANCEL_POLL_S):
            if cancel.is_set():
                self._stop_prefill.set()
                return self._lock.acquire(timeout=PREFILL_WAIT_S)
            if time.monotonic() > deadline:
                return False
        return True

    def _prepare(
        self, messages: ChatMessages, sampling: SamplingSettings, tools: Sequence[ToolDefinition]
    ) -> Request:
        raise NotImplementedError

    def _api_messages(self, messages: ChatMessages) -> list[dict[str, Any]]:
        """The messages as this kind's chat API takes them."""
        return chat_messages(messages)

    def _counted_request(self, messages: ChatMessages, tools: Sequence[ToolDefinition]) -> Request:
        """The prompt counted by the server's own tokenizer (refused here when
        it cannot fit); with tools, the messages and the tools besides, for
        the server's chat API, which reads the calls."""
        counted = exact_request(self.tokenize_chat(messages, tools=tools), self.info.n_ctx)
        if not tools:
            return counted
        return Request(counted.tokens, self._api_messages(messages), tool_definitions(tools))

    def _prepare_continuation(self, messages: ChatMessages) -> Request:
        """The request that goes on with the last message, a reply cut short.
        A chat API always closes the last message (the model would start a
        new reply, not go on with this one): only a kind that takes a prompt
        of token ids can."""
        raise KvchatError(self.info.cannot_continue())

    def _pieces(self, call: ReplyCall) -> Generator[Piece | Summary | PromptProgress, None, None]:
        """The reply's pieces as the server streams them, its figures last; a
        kind whose server says how far it has read the prompt yields that too."""
        raise NotImplementedError

    def _run(
        self,
        request: Request,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool,
        started: float,
    ) -> Iterator[EngineEvent]:
        # The server applies stop sequences; ReplyText decodes and sanitizes
        # (the thinking, sent in a field of its own, with its own: an escape
        # sequence may be split across a server's chunks of either).
        reply = ReplyText()
        thought = ReplyText()
        raw_text: list[str] = []
        ids: list[int] = []
        ids_known = True
        choices: list[TokenChoice] = []
        summary = Summary()
        error: str | None = None
        first_at: float | None = None
        generated = 0
        # A seed always, as the local engine does: the reply can be reproduced.
        if sampling.seed is None:
            sampling = dataclasses.replace(sampling, seed=random.randrange(2**32 - 1))
        pieces = self._pieces(ReplyCall(request, sampling, cancel, record_probs))
        try:
            for item in pieces:
                if isinstance(item, Summary):
                    summary = item
                    continue
                if isinstance(item, PromptProgress):
                    yield item
                    continue
                if first_at is None:
                    first_at = time.perf_counter()
                generated += 1
                if item.thinking:
                    ids_known = False  # the ids would not spell the answer alone
                    yield TokenEvent(
                        thought.feed(item.text.encode("utf-8")), item.token_id, thinking=True
                    )
                    continue
                raw_text.append(item.text)
                ids.append(item.token_id)
                # Ids are saved as 32-bit integers: no vocabulary comes near the
                # largest, a broken or hostile server may pass it.
                ids_known = ids_known and item.known_id and is_token_id(item.token_id)
                if item.choice is not None:
                    choices.append(item.choice)
                yield TokenEvent(reply.feed(item.text.encode("utf-8")), item.token_id, item.choice)
                if cancel.is_set() or self._closed:
                    break
        except ServerError as failure:
            if not (cancel.is_set() or self._closed):
                if generated == 0:
                    raise
                error = str(failure)
        finally:
            pieces.close()  # a stopped reply's connection closes now
        tail = thought.flush()
        if tail:
            yield TokenEvent(tail, -1, thinking=True)
        tail = reply.flush()
        if tail:
            yield TokenEvent(tail, -1)
        ended = time.perf_counter()
        first = first_at or ended
        finish = self._finish_reason(summary, error, cancel, request, generated)
        prompt_tokens = summary.prompt_tokens or len(request.tokens)
        generated = summary.generated_tokens or generated
        decode_s = ended - first
        tps = summary.decode_tps
        if tps is None:
            tps = (generated - 1) / decode_s if generated > 1 and decode_s > 0 else 0.0
        stats = ReplyStats(
            prompt_tokens=prompt_tokens,
            # Unknown (a cancelled reply on servers that report it only at the
            # end): counted as all evaluated rather than claim a reuse.
            prompt_evaluated=min(prompt_tokens, summary.prompt_evaluated or prompt_tokens),
            generated_tokens=generated,
            ttft_s=first - started,
            decode_tps=tps,
            finish_reason=finish,
            seed=summary.seed if summary.seed is not None else sampling.seed,
            total_s=ended - started,
        )
        # A reply cut short (max tokens, Escape, a dropped connection) keeps
        # its ids too: each id came with its text. A kind that sends them back
        # checks first that they still spell the reply (it may be edited, or
        # from another model).
        spelled = "".join(raw_text) == reply.text
        token_ids = tuple(ids) if ids_known and summary.clean_ids and spelled else None
        self._reply_done(request, summary)
        yield Finished(
            reply.text,
            stats,
            tuple(choices),
            token_ids,
            error,
            tool_calls=summary.tool_calls,
            tool_call_error=summary.tool_call_error,
        )

    def _finish_reason(
        self,
        summary: Summary,
        error: str | None,
        cancel: threading.Event,
        request: Request,
        generated: int,
    ) -> FinishReason:
        if cancel.is_set() or self._closed:
            return "stopped"
        if error is not None:
            return "error"
        prompt = summary.prompt_tokens or len(request.tokens)
        if summary.finish == "max_tokens" and prompt + generated >= self.info.n_ctx:
            return "context_full"
        return summary.finish

    def _reply_done(self, request: Request, summary: Summary) -> None:
        """Hook: a kind that estimates counts learns from the server's figure."""

    # -- what the server owns ----------------------------------------------------

    def prefill(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        exact: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> bool:
        return False

    def rebatch_reply(self) -> bool:
        return False  # the server's cache is the server's

    def state_identity(self) -> StateIdentity:
        return remote_state_identity(self.info)

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        return 0  # the server's cache is not visible from here

    def save_state(self, timeout: float = 1.0) -> KvState | None:
        if self._closed:
            raise EngineClosedError("The server connection was closed.")
        return None

    def restore_state(self, state: KvState) -> bool:
        if self._closed:
            raise EngineClosedError("The server connection was closed.")
        return False

    def reset(self) -> None:
        """Nothing to do: the server keeps (or drops) its cache on its own."""

    def close(self) -> None:
        """A reply under way ends after its current token (its stream is shut
        down), a prefill at once; later calls raise `EngineClosedError`."""
        self._closed = True
        self._stop_prefill.set()
        with self._lock:
            self._http.close()


def _stopped_unsent(request: Request, sampling: SamplingSettings, started: float) -> Finished:
    """The end of a reply stopped before its request was sent: no text, its
    prompt counted as not read (the server may hold part of it from a prefill)."""
    waited = time.perf_counter() - started
    stats = ReplyStats(
        prompt_tokens=len(request.tokens),
        prompt_evaluated=len(request.tokens),
        generated_tokens=0,
        ttft_s=waited,
        decode_tps=0.0,
        finish_reason="stopped",
        seed=sampling.seed,
        total_s=waited,
    )
    return Finished("", stats)
