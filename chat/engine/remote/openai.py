"""Any OpenAI-compatible server (LM Studio, llamafile, a proxy...), and the
parts of the OpenAI streaming protocol vLLM shares.

Such a server renders and tokenizes the chat itself and does not offer to
count: `tokenize_chat` is an estimate (`ModelInfo.count_exact` False),
corrected after each reply by the server's `usage.prompt_tokens` (asked for
with `stream_options.include_usage`). Its window is known only when its model
list says (`max_model_len`, `context_length`, ...) or the config gives it;
otherwise `n_ctx` is an assumption and `ModelInfo.n_ctx_known` is False.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from typing import Any

from chat.conversations.conversation import FinishReason
from chat.engine.reasoning.server_fields import openai_thinking
from chat.engine.remote import ServerConfig
from chat.engine.remote.engine import (
    Piece,
    ReplyCall,
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
from chat.errors import ServerError, UnknownServerModelError
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
}
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
    if type(prompt) is int and prompt >= 0:
        summary.prompt_tokens = prompt
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if type(cached) is int and cached >= 0:
            summary.prompt_evaluated = max(0, prompt - cached)
    if type(completion) is int and completion >= 0:
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
    with http.stream(path, body, cancel) as lines:
        for payload in sse_data(lines):
            event = parse_json_line(payload, http.url)
            choices = event.get("choices")
            if choices is not None and not isinstance(choices, list):
                raise ServerError(f"The server at {http.url} sent an event of another shape.")
            first = choices[0] if choices and isinstance(choices[0], dict) else None
            yield first, event.get("usage")


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
        )
        self.estimate = TokenEstimate()

    def _pieces(self, call: ReplyCall) -> Generator[Piece | Summary, None, None]:
        body = {
            "model": self.model,
            "messages": call.request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            **openai_sampling(call.sampling),
        }
        if call.record_probs:
            body |= {"logprobs": True, "top_logprobs": TOP_N}
        summary = Summary(clean_ids=False)
        ended = False
        for choice, usage in stream_choices(self._http, "/v1/chat/completions", body, call.cancel):
            usage_summary(usage, summary)
            if choice is None:
                continue
            delta = choice.get("delta")
            thinking = openai_thinking(delta) if isinstance(delta, dict) else ""
            if thinking:
                yield Piece(thinking, thinking=True)
            text = delta.get("content") if isinstance(delta, dict) else None
            steps = _chat_logprobs(choice.get("logprobs"))
            if isinstance(text, str) and (text or steps):
                yield from _pieces_of(text, steps, call.sampling, call.record_probs)
            if choice.get("finish_reason") is not None:
                finish_of(choice, summary)
                ended = True
        if ended:
            yield summary
        elif not call.cancel.is_set():
            raise ServerError(f"The server at {self._http.url} ended the reply unfinished.")


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
