"""Ollama's native API (`/api/chat`, a stream of JSON lines).

The window: the model's `num_ctx` parameter (`POST /api/show`, its
`parameters`) when it sets one. Otherwise Ollama would use its own default,
which depends on its version and settings and is not reported; so kvchat asks
for a window in every request (`options.num_ctx`): the model's training window
(`model_info`'s `<arch>.context_length`) capped at `DEFAULT_NUM_CTX`. Either
way the window is known, not guessed.

Ollama does not tokenize for clients: counts are estimated and corrected by
each reply's `prompt_eval_count` (the prompt's tokens, as its docs define it;
how many of them were reused is not reported, so a reply counts as fully
evaluated). Its figures: `eval_count` tokens in `eval_duration` ns.

Tools: `/api/chat` takes `tools` (OpenAI's shape) and sends a reply's calls
whole in `message.tool_calls` (`{"function": {"name", "arguments": {...}}}`,
the arguments an object); a call goes back the same way, its result as a
`tool` message naming the tool (`tool_name`) and the call (`tool_call_id`).
`/api/show` lists a model's `capabilities`: one without "tools" is not
offered any (Ollama would refuse the request).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from chat.conversations.conversation import FinishReason
from chat.engine.protocol import ChatMessages
from chat.engine.remote.engine import (
    Piece,
    ReplyCall,
    Summary,
    chat_messages,
    server_model_info,
    window_size,
)
from chat.engine.remote.estimate import EstimatingEngine, TokenEstimate
from chat.engine.remote.http import ServerHttp, parse_json_line
from chat.engine.remote.openai import (
    choose_model,
    llama_sampling,
    openai_sampling,
    tool_call,
    tools_body,
)
from chat.engine.remote.probs import token_choice
from chat.engine.token_probs import TOP_N
from chat.engine.tool_calls.calls import ToolCall
from chat.errors import ServerError
from chat.json_numbers import is_count
from chat.sanitize import sanitize_line
from chat.settings.schema import SamplingSettings

DEFAULT_NUM_CTX = 4096
"""The window kvchat asks for when the model sets none (Ollama's own default
in recent versions; more costs the server memory the user did not ask for)."""
_DONE_REASONS: dict[str, FinishReason] = {"stop": "done", "length": "max_tokens"}


def model_names(tags: Any) -> list[str]:
    entries = tags.get("models") if isinstance(tags, dict) else None
    if not isinstance(entries, list):
        return []
    names = [e.get("name") or e.get("model") for e in entries if isinstance(e, dict)]
    return [n for n in names if isinstance(n, str) and n]


def num_ctx_parameter(show: dict[str, Any]) -> int | None:
    """`num_ctx` from the model's parameters ("num_ctx 8192" lines)."""
    parameters = show.get("parameters")
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        name, _, value = line.strip().partition(" ")
        digits = value.strip()
        if name == "num_ctx" and digits.isdigit():
            # More digits than any window has are not converted at all.
            return window_size(int(digits)) if len(digits) <= 9 else None
    return None


def context_length(show: dict[str, Any]) -> int | None:
    info = show.get("model_info")
    if not isinstance(info, dict):
        return None
    for key, value in info.items():
        if isinstance(key, str) and key.endswith(".context_length"):
            return window_size(value)
    return None


class OllamaEngine(EstimatingEngine):
    # Ollama's engine has no Mirostat (its API docs no longer list it).
    # Ollama takes `think` (on or off) but no budget.
    ignored_settings = frozenset(
        {"mirostat_mode", "mirostat_tau", "mirostat_eta", "thinking_budget", "keep_thinking"}
    )

    def __init__(self, http: ServerHttp, tags: Any) -> None:
        super().__init__(http)
        names = model_names(tags)
        wanted = http.config.model
        if wanted is not None and wanted not in names and f"{wanted}:latest" in names:
            wanted = f"{wanted}:latest"  # Ollama's own shorthand
        self.model = choose_model(http.url, wanted, names)
        show = http.post_json("/api/show", {"model": self.model})
        show = show if isinstance(show, dict) else {}
        trained = context_length(show)
        configured = num_ctx_parameter(show)
        self._num_ctx: int | None = None  # sent in each request when the model sets none
        if http.config.n_ctx is not None:
            n_ctx, source = http.config.n_ctx, "the configured window (sent as num_ctx)"
            self._num_ctx = n_ctx
        elif configured is not None:
            n_ctx, source = configured, "Ollama num_ctx (the model's parameters)"
        else:
            n_ctx = min(trained or DEFAULT_NUM_CTX, DEFAULT_NUM_CTX)
            source = "num_ctx asked for by kvchat (the model sets none)"
            self._num_ctx = n_ctx
        capabilities = show.get("capabilities")
        no_tools = None
        if isinstance(capabilities, list) and "tools" not in capabilities:
            no_tools = (
                f"The model {sanitize_line(self.model)[:80]} on the Ollama server at {http.url} "
                "cannot call tools (Ollama does not list tools among its capabilities)."
            )
        self.info = server_model_info(
            http,
            self.model,
            "ollama",
            n_ctx,
            source,
            n_ctx_train=trained,
            count_exact=False,
            api_tool_calls=no_tools is None,
            no_tools_reason=no_tools,
        )
        self.estimate = TokenEstimate()

    def _options(self, sampling: SamplingSettings) -> dict[str, Any]:
        options = openai_sampling(sampling, max_tokens="num_predict") | llama_sampling(sampling)
        if self._num_ctx is not None:
            options["num_ctx"] = self._num_ctx
        return options

    def _api_messages(self, messages: ChatMessages) -> list[dict[str, Any]]:
        return ollama_messages(messages)

    def _pieces(self, call: ReplyCall) -> Generator[Piece | Summary, None, None]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": call.request.messages,
            "stream": True,
            "options": self._options(call.sampling),
            **tools_body(call.request, self.tool_choice),
        }
        body.pop("tool_choice", None)  # Ollama has none: the model chooses
        if not self.thinking:
            # Only when off: `think` on, for a model that cannot think, is an error.
            body["think"] = False
        if call.record_probs:
            body |= {"logprobs": True, "top_logprobs": TOP_N}
        url = self._http.url
        calls: list[ToolCall] = []
        call_error: str | None = None
        with self._http.stream("/api/chat", body, call.cancel) as lines:
            for line in lines:
                if not line.strip():
                    continue
                event = parse_json_line(line, url)
                message = event.get("message")
                found = message.get("tool_calls") if isinstance(message, dict) else None
                for entry in found if isinstance(found, list) else []:
                    read = _tool_call(entry)
                    if isinstance(read, str):
                        call_error = read
                    else:
                        calls.append(read)
                thinking = message.get("thinking") if isinstance(message, dict) else None
                if isinstance(thinking, str) and thinking:
                    yield Piece(thinking, thinking=True)
                text = message.get("content") if isinstance(message, dict) else None
                steps = _logprobs(event.get("logprobs"), call.sampling) if call.record_probs else []
                if isinstance(text, str) and (text or steps):
                    if not steps:
                        yield Piece(text)
                    for i, choice in enumerate(steps):
                        yield Piece(text if i == 0 else "", choice=choice)
                if event.get("done") is True:
                    summary = _summary(event)
                    if call_error is None:
                        summary.tool_calls = tuple(calls)
                    summary.tool_call_error = call_error
                    yield summary
                    return
        if not call.cancel.is_set():
            raise ServerError(f"The Ollama server at {url} ended the reply unfinished.")


def ollama_messages(messages: ChatMessages) -> list[dict[str, Any]]:
    """The messages as `/api/chat` takes them: a call's arguments as an
    object, a result naming its tool as `tool_name`."""
    shown = chat_messages(messages, arguments_as_text=False)
    for item in shown:
        if item["role"] == "tool" and "name" in item:
            item["tool_name"] = item.pop("name")
    return shown


def _tool_call(entry: Any) -> ToolCall | str:
    function = entry.get("function") if isinstance(entry, dict) else None
    if not isinstance(function, dict):
        return "The model called a tool without naming it."
    assert isinstance(entry, dict)
    return tool_call(function.get("name"), function.get("arguments", {}), entry.get("id", ""))


def _summary(event: dict[str, Any]) -> Summary:
    reason = event.get("done_reason")
    summary = Summary(
        finish=_DONE_REASONS.get(reason, "done") if isinstance(reason, str) else "done",
        clean_ids=False,
    )
    prompt, count, duration = (
        event.get("prompt_eval_count"),
        event.get("eval_count"),
        event.get("eval_duration"),
    )
    if is_count(prompt):
        summary.prompt_tokens = prompt
    if is_count(count):
        summary.generated_tokens = count
        if is_count(duration) and duration > 0 and count > 0:
            summary.decode_tps = count / (duration / 1e9)
    return summary


def _logprobs(value: Any, sampling: SamplingSettings) -> list[Any]:
    """Ollama's `logprobs`: one {token, logprob, top_logprobs} per token."""
    if not isinstance(value, list):
        return []
    steps = []
    for step in value:
        if not isinstance(step, dict):
            continue
        top = step.get("top_logprobs")
        alternatives = (
            [(str(t.get("token", "")), t.get("logprob")) for t in top if isinstance(t, dict)]
            if isinstance(top, list)
            else []
        )
        steps.append(
            token_choice(0, str(step.get("token", "")), step.get("logprob"), alternatives, sampling)
        )
    return steps
