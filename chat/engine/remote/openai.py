"""Any OpenAI-compatible server (LM Studio, llamafile, a proxy...), and the
parts of the OpenAI streaming protocol vLLM shares.

Such a server renders and tokenizes the chat itself and does not offer to
count: `tokenize_chat` is an estimate (`ModelInfo.count_exact` False),
corrected after each reply by the server's `usage.prompt_tokens` (asked for
with `stream_options.include_usage`). Its window is known only when its model
list says (`max_model_len`, `context_length`, ...) or the config gives it;
otherwise `n_ctx` is an assumption and `ModelInfo.n_ctx_known` is False.

Tools: the request carries `tools` (and `tool_choice`), and the calls come as
`tool_calls` deltas in the stream, a piece at a time: each delta's `index`
says which call it belongs to, the call's `id` and name come with its first
piece, its arguments (a JSON string) in pieces after (`ToolCallDeltas`). A
server that ignores `tools` cannot be told from one whose model chose not to
call: such a server simply never calls.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from chat.conversations.conversation import FinishReason
from chat.engine.reasoning.server_fields import openai_thinking
from chat.engine.remote import ServerConfig
from chat.engine.remote.engine import (
    Piece,
    ReplyCall,
    Request,
    Summary,
    out_of_bounds_note,
    served_models,
    server_model_info,
    shown_names,
    window_size,
)
from chat.engine.remote.estimate import EstimatingEngine, TokenEstimate
from chat.engine.remote.http import ServerHttp, parse_json_line, sse_data
from chat.engine.remote.probs import token_choice
from chat.engine.token_probs import TOP_N
from chat.engine.tool_calls.calls import ToolCall, new_call_id
from chat.errors import ServerError, UnknownServerModelError
from chat.json_numbers import is_count
from chat.sanitize import sanitize_line
from chat.settings.schema import SamplingSettings

ASSUMED_N_CTX = 4096
"""The window assumed when a server does not say its own (and the config
does not either); `ModelInfo.n_ctx_known` is then False."""
_WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
"""Where servers put a model's window in their model list (vLLM, OpenRouter,
LM Studio ...)."""
FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "done",
    "eos": "done",
    "length": "max_tokens",
    "abort": "stopped",
    "tool_calls": "done",
}
MAX_CALL_CHARS = 1 << 20
"""A call's arguments longer than this are not read (a broken or hostile
server could otherwise stream them without end)."""
# Settings the OpenAI chat API has no parameter for.
OPENAI_IGNORED = frozenset(
    {"top_k", "min_p", "typical_p", "repeat_penalty"}
    | {"mirostat_mode", "mirostat_tau", "mirostat_eta"}
    # The chat API has no common switch for thinking, nor a budget.
    | {"thinking", "thinking_budget", "keep_thinking"}
)


def choose_model(url: str, wanted: str | None, names: list[str]) -> str:
    """`wanted` if served, else the only (or first) model; raises
    `UnknownServerModelError` listing what is served."""
    if not names:
        raise ServerError(f"The server at {url} serves no model.")
    if wanted is None:
        return names[0]
    if wanted in names:
        return wanted
    shown = shown_names(names)
    served = ", ".join(shown[:20])
    raise UnknownServerModelError(
        f"The server at {url} does not serve the model {wanted!r}; it serves: {served}.",
        tuple(shown),
    )


def window(config: ServerConfig, entry: dict[str, Any], source: str) -> tuple[int, str, bool]:
    """The model's window, where it came from, and whether it is known."""
    if config.n_ctx is not None:
        return config.n_ctx, "the configured window (the server does not say)", True
    for key in _WINDOW_KEYS:
        value = entry.get(key)
        if value is None:
            continue
        size = window_size(value)
        if size is not None:
            return size, f"{source} {key}", True
        return (
            ASSUMED_N_CTX,
            f"unknown: {out_of_bounds_note(value)}; {ASSUMED_N_CTX:,} assumed",
            False,
        )
    return ASSUMED_N_CTX, f"unknown: the server does not say; {ASSUMED_N_CTX:,} assumed", False


def usage_summary(usage: Any, summary: Summary) -> None:
    """OpenAI's `usage`: prompt tokens, of which `cached_tokens` were reused."""
    if not isinstance(usage, dict):
        return
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if is_count(prompt):
        summary.prompt_tokens = prompt
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if is_count(cached):
            summary.prompt_evaluated = max(0, prompt - cached)
    if is_count(completion):
        summary.generated_tokens = completion


def openai_sampling(sampling: SamplingSettings, max_tokens: str = "max_tokens") -> dict[str, Any]:
    """The sampling settings every server reads by OpenAI's names; `max_tokens`
    is the key the server reads the reply's length limit under."""
    body: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        max_tokens: sampling.max_tokens,
    }
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body


def llama_sampling(sampling: SamplingSettings) -> dict[str, Any]:
    """The sampling settings that llama.cpp's samplers read beyond OpenAI's
    (llama-server and Ollama both take them under these names)."""
    return {
        "top_k": sampling.top_k,
        "min_p": sampling.min_p,
        "typical_p": sampling.typical_p,
        "repeat_penalty": sampling.repeat_penalty,
    }


def stream_choices(
    http: ServerHttp, path: str, body: dict[str, Any], cancel: threading.Event
) -> Iterator[tuple[dict[str, Any] | None, Any]]:
    """An OpenAI stream's events: (its first choice or None, its usage or None)."""
    for first, event in stream_events(http, path, body, cancel):
        yield first, event.get("usage")


def stream_events(
    http: ServerHttp, path: str, body: dict[str, Any], cancel: threading.Event
) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any]]]:
    """An OpenAI stream's events: (its first choice or None, the whole event)."""
    with http.stream(path, body, cancel) as lines:
        for payload in sse_data(lines):
            event = parse_json_line(payload, http.url)
            choices = event.get("choices")
            if choices is not None and not isinstance(choices, list):
                raise ServerError(f"The server at {http.url} sent an event of another shape.")
            first = choices[0] if choices and isinstance(choices[0], dict) else None
            yield first, event


def tools_body(request: Request, tool_choice: str) -> dict[str, Any]:
    """The request's tools as a chat API takes them (nothing when none)."""
    if not request.tools:
        return {}
    return {"tools": request.tools, "tool_choice": tool_choice}


class ToolCallDeltas:
    """A reply's calls put together from OpenAI's streamed `tool_calls`
    deltas (their `index` says which call a piece continues; the id and the
    name come once, the arguments' JSON text in pieces)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._calls: dict[int, dict[str, str]] = {}
        self._size = 0

    def feed(self, deltas: Any) -> None:
        if not isinstance(deltas, list):
            return
        for position, delta in enumerate(deltas):
            if not isinstance(delta, dict):
                continue
            index = delta.get("index", position)
            index = index if type(index) is int else position
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if isinstance(delta.get("id"), str) and delta["id"]:
                call["id"] = delta["id"]
            function = delta.get("function")
            if not isinstance(function, dict):
                continue
            name = function.get("name")
            if isinstance(name, str) and name and not call["name"]:
                call["name"] = name  # sent once, with the call's first piece
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # some servers send the object itself
                arguments = json.dumps(arguments)
            if isinstance(arguments, str):
                call["arguments"] += arguments
                self._size += len(arguments)
            if self._size > MAX_CALL_CHARS:
                raise ServerError(
                    f"The server at {self._url} sent a tool call of over "
                    f"{MAX_CALL_CHARS >> 20} MiB; the reply was abandoned."
                )

    def read(self, summary: Summary) -> None:
        """Put the calls (or why one cannot be used) in `summary`."""
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            found = tool_call(call["name"], call["arguments"] or "{}", call["id"])
            if isinstance(found, str):
                summary.tool_call_error = found
                return
            calls.append(found)
        summary.tool_calls = tuple(calls)


def tool_call(name: object, arguments: object, call_id: object = "") -> ToolCall | str:
    """A call as a server reported it (the arguments a JSON string or an
    object), or why it cannot be used, in one sentence. A call without an
    id is given one (it goes back with the call's result)."""
    if not isinstance(name, str) or not name:
        return "The model called a tool without naming it."
    # The server's word: one clean line (an offered tool's name is one already).
    name = sanitize_line(name)[:200]
    shown = name[:80]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return f"The model's call of '{shown}' has arguments that are not JSON."
    if not isinstance(arguments, dict):
        return f"The model's call of '{shown}' has arguments that are not a JSON object."
    if isinstance(call_id, str) and call_id:
        return ToolCall(name, arguments, call_id)
    return ToolCall(name, arguments, new_call_id())


def chat_pieces(
    http: ServerHttp,
    path: str,
    body: dict[str, Any],
    call: ReplyCall,
    summary: Summary,
    on_event: Callable[[dict[str, Any], Summary], None] | None = None,
) -> Generator[Piece | Summary, None, None]:
    """A chat completions stream (`body` already holds the messages, tools
    and sampling) as pieces, then `summary` with the server's figures and the
    calls; `on_event(event, summary)` reads what a kind adds to each event."""
    if call.record_probs:
        body |= {"logprobs": True, "top_logprobs": TOP_N}
    calls = ToolCallDeltas(http.url)
    ended = False
    for choice, event in stream_events(http, path, body, call.cancel):
        usage_summary(event.get("usage"), summary)
        if on_event is not None:
            on_event(event, summary)
        if choice is None:
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        thinking = openai_thinking(delta)
        if thinking:
            yield Piece(thinking, thinking=True)
        text = delta.get("content")
        steps = _chat_logprobs(choice.get("logprobs"))
        if isinstance(text, str) and (text or steps):
            yield from _pieces_of(text, steps, call.sampling, call.record_probs)
        calls.feed(delta.get("tool_calls"))
        if choice.get("finish_reason") is not None:
            finish_of(choice, summary)
            ended = True
    if ended:
        calls.read(summary)
        yield summary
    elif not call.cancel.is_set():
        raise ServerError(f"The server at {http.url} ended the reply unfinished.")


def finish_of(choice: dict[str, Any], summary: Summary) -> None:
    reason = choice.get("finish_reason")
    if isinstance(reason, str):
        summary.finish = FINISH_REASONS.get(reason, "done")
        summary.clean_ids = False


class OpenAIEngine(EstimatingEngine):
    """Chat completions (`POST /v1/chat/completions`), counts estimated."""

    ignored_settings = OPENAI_IGNORED

    def __init__(self, http: ServerHttp, models: Any, kind: str = "openai") -> None:
        super().__init__(http)
        entries = served_models(models)
        config = http.config
        self.model = choose_model(http.url, config.model, [e["id"] for e in entries])
        entry = next(e for e in entries if e["id"] == self.model)
        n_ctx, source, known = window(config, entry, "/v1/models")
        self.info = server_model_info(
            http,
            self.model,
            kind,
            n_ctx,
            source,
            n_ctx_known=known,
            count_exact=False,
            # Whether the server passes tools on is not said anywhere: they are sent.
            api_tool_calls=True,
        )
        self.estimate = TokenEstimate()

    def _pieces(self, call: ReplyCall) -> Generator[Piece | Summary, None, None]:
        body = {
            "model": self.model,
            "messages": call.request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            **openai_sampling(call.sampling),
            **tools_body(call.request, self.tool_choice),
        }
        summary = Summary(clean_ids=False)
        yield from chat_pieces(self._http, "/v1/chat/completions", body, call, summary)


def _chat_logprobs(logprobs: Any) -> list[dict[str, Any]]:
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return [s for s in content if isinstance(s, dict)] if isinstance(content, list) else []


def _pieces_of(
    text: str, steps: list[dict[str, Any]], sampling: SamplingSettings, record_probs: bool
) -> Iterator[Piece]:
    """One piece per token the event carries (one when it does not say); the
    event's text goes with the first."""
    if not steps:
        yield Piece(text)
        return
    for i, step in enumerate(steps):
        choice = None
        if record_probs:
            top = step.get("top_logprobs")
            alternatives = (
                [(str(t.get("token", "")), t.get("logprob")) for t in top if isinstance(t, dict)]
                if isinstance(top, list)
                else []
            )
            choice = token_choice(
                0, str(step.get("token", "")), step.get("logprob"), alternatives, sampling
            )
        yield Piece(text if i == 0 else "", choice=choice)
