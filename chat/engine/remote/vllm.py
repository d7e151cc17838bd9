"""vLLM's OpenAI-compatible server: exact counts, OpenAI's streaming.

vLLM tokenizes a chat for us (`POST /tokenize` with `messages` and
`add_generation_prompt`: its chat template and tokenizer, with the special
tokens the template writes and none added). The reply is asked for with those
very ids (`POST /v1/completions` takes a prompt of token ids and adds
nothing), so the count is what the model sees. The window is the model's
`max_model_len` in `/v1/models`. Reused prompt tokens are reported when the
server runs with `--enable-prompt-tokens-details` (`cached_tokens`); else a
reply counts as fully evaluated.

Earlier replies go back as text, tokenized again by `/tokenize`, not as the
ids they were sampled as (as the llama-server engine sends them): its
streamed completions here carry no ids, and splicing ids into the prompt
needs the rendered text around each reply, which `/tokenize` does not give.
Not built without a vLLM to test it against (docs/servers.md says what this
costs).

Tools: counted by `/tokenize` with the `tools` (its chat template renders
them), and a reply that may call one is asked of `/v1/chat/completions` with
the same messages and `tools`: vLLM reads the calls from the model's output
only there (with its `--tool-call-parser`) and streams them as OpenAI's
`tool_calls` deltas. A vLLM started without `--enable-auto-tool-choice`
refuses such a request; its answer is turned into a sentence saying so.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from chat.engine.protocol import ChatMessages
from chat.engine.remote.engine import (
    Piece,
    RemoteEngine,
    ReplyCall,
    Request,
    Summary,
    chat_messages,
    served_models,
    server_model_info,
    tool_definitions,
)
from chat.engine.remote.http import ServerHttp, json_number
from chat.engine.remote.openai import (
    chat_pieces,
    choose_model,
    finish_of,
    openai_sampling,
    stream_choices,
    tools_body,
    usage_summary,
    window,
)
from chat.engine.remote.probs import token_choice
from chat.engine.token_probs import TOP_N
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import ServerError
from chat.settings.schema import SamplingSettings


class VllmEngine(RemoteEngine):
    # kvchat samples from vLLM's /v1/completions, which has no thinking budget.
    ignored_settings = frozenset(
        {"typical_p", "mirostat_mode", "mirostat_tau", "mirostat_eta"}
        | {"thinking_budget", "keep_thinking"}
    )

    def __init__(self, http: ServerHttp, models: Any) -> None:
        super().__init__(http)
        entries = served_models(models)
        self.model = choose_model(http.url, http.config.model, [e["id"] for e in entries])
        entry = next(e for e in entries if e["id"] == self.model)
        n_ctx, source, known = window(http.config, entry, "vLLM")
        self.info = server_model_info(
            http,
            self.model,
            "vllm",
            n_ctx,
            source,
            n_ctx_known=known,
            # Whether vLLM runs with --enable-auto-tool-choice is not said:
            # a server without it refuses the first request with tools.
            api_tool_calls=True,
        )

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        answer = self._http.post_json(
            "/tokenize",
            {
                "model": self.model,
                "messages": chat_messages(messages),
                "add_generation_prompt": add_generation_prompt,
                "add_special_tokens": False,
                **self._template_options(),
                **({"tools": tool_definitions(tools)} if tools else {}),
            },
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise ServerError(f"The vLLM server at {self._http.url} did not tokenize the chat.")
        return tokens

    def _template_options(self) -> dict[str, Any]:
        # The prompt is rendered by the server: thinking is turned off in the
        # template itself (a template without the switch ignores it).
        return {} if self.thinking else {"chat_template_kwargs": {"enable_thinking": False}}

    def _prepare(
        self, messages: ChatMessages, sampling: SamplingSettings, tools: Sequence[ToolDefinition]
    ) -> Request:
        return self._counted_request(messages, tools)

    def _pieces(self, call: ReplyCall) -> Generator[Piece | Summary, None, None]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": call.request.tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **openai_sampling(call.sampling),
            # vLLM's own call.sampling parameters (it turns top_k off with -1).
            "top_k": call.sampling.top_k if call.sampling.top_k > 0 else -1,
            "min_p": call.sampling.min_p,
            "repetition_penalty": call.sampling.repeat_penalty,
        }
        if call.request.tools:
            yield from self._chat_pieces(call, body)
            return
        if call.record_probs:
            body["logprobs"] = TOP_N
        summary = Summary(clean_ids=False)
        ended = False
        for choice, usage in stream_choices(self._http, "/v1/completions", body, call.cancel):
            usage_summary(usage, summary)
            if choice is None:
                continue
            text = choice.get("text")
            steps = _completion_logprobs(choice.get("logprobs"), call.sampling, call.record_probs)
            if isinstance(text, str) and (text or steps):
                if not steps:
                    yield Piece(text)
                for i, step in enumerate(steps):
                    yield Piece(text if i == 0 else "", choice=step)
            if choice.get("finish_reason") is not None:
                finish_of(choice, summary)
                ended = True
        if ended:
            yield summary
        elif not call.cancel.is_set():
            raise ServerError(f"The vLLM server at {self._http.url} ended the reply unfinished.")

    def _chat_pieces(
        self, call: ReplyCall, body: dict[str, Any]
    ) -> Generator[Piece | Summary, None, None]:
        """A reply that may call a tool: the chat API, with the messages
        counted and the tools."""
        del body["prompt"]
        body |= {
            "messages": call.request.messages,
            **tools_body(call.request, self.tool_choice),
            **self._template_options(),
        }
        try:
            yield from chat_pieces(
                self._http, "/v1/chat/completions", body, call, Summary(clean_ids=False)
            )
        except ServerError as error:
            if "enable-auto-tool-choice" not in str(error):
                raise
            raise ServerError(
                f"The vLLM server at {self._http.url} cannot call tools: it was started "
                "without --enable-auto-tool-choice (start it with that and the "
                "--tool-call-parser of its model)."
            ) from None


def _completion_logprobs(
    logprobs: Any, sampling: SamplingSettings, record_probs: bool
) -> list[Any]:
    """The completions API's logprobs: parallel lists `tokens`,
    `token_logprobs`, `top_logprobs` (a {text: logprob} per token)."""
    if not isinstance(logprobs, dict):
        return []
    tokens = logprobs.get("tokens")
    values = logprobs.get("token_logprobs")
    tops = logprobs.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list):
        return []
    steps = []
    for i, text in enumerate(tokens):
        top = tops[i] if isinstance(tops, list) and i < len(tops) else None
        alternatives = (
            sorted(((str(t), lp) for t, lp in top.items()), key=lambda p: -_num(p[1]))
            if isinstance(top, dict)
            else []
        )
        value = values[i] if i < len(values) else None
        steps.append(
            token_choice(0, str(text), value, alternatives, sampling) if record_probs else None
        )
    return steps


def _num(value: object) -> float:
    number = json_number(value)
    return number if number is not None else float("-inf")
