"""vLLM's OpenAI-compatible server: exact counts, OpenAI's streaming.

vLLM tokenizes a chat for us (`POST /tokenize` with `messages` and
`add_generation_prompt`: its chat template and tokenizer, with the special
tokens the template writes and none added). The reply is asked for with those
very ids (`POST /v1/completions` takes a prompt of token ids and adds
nothing), so the count is what the model sees. The window is the model's
`max_model_len` in `/v1/models`. Reused prompt tokens are reported when the
server runs with `--enable-prompt-tokens-details` (`cached_tokens`); else a
reply counts as fully evaluated.

A reply goes back as the ids it was sampled as, not as its text (as on
llama-server; chat.engine.remote.sampled_ids): tokenized again, its text can
come out as other tokens, and vLLM's prefix cache would match only up to
there. The ids come in the stream (`return_token_ids`: each chunk's
`token_ids`; a vLLM too old for it sends none, and its replies go back as
text). `/tokenize` gives ids only, not the rendered text, so a reply's place
in the prompt is found in ids: the prompt the reply was sampled from (the
conversation before it, with the generation prompt) must be where the
conversation's prompt starts, and the reply's text, tokenized alone, must
follow it token for token; then those tokens are swapped for the sampled
ones, which `/detokenize` writes as exactly the same text. A template that
writes a reply otherwise (one that drops earlier thinking, say) keeps that
reply as text. A server that refuses token-id prompts at `/v1/completions`
(a gateway that offers only the chat API) is found out at the first reply:
it is asked through the chat API from then on, with the text, and
`reuse_note` says so.

Tools: counted by `/tokenize` with the `tools` (its chat template renders
them), and a reply that may call one is asked of `/v1/chat/completions` with
the same messages and `tools`: vLLM reads the calls from the model's output
only there (with its `--tool-call-parser`) and streams them as OpenAI's
`tool_calls` deltas. A vLLM started without `--enable-auto-tool-choice`
refuses such a request; its answer is turned into a sentence saying so.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from chat.engine.protocol import ChatMessages
from chat.engine.remote.engine import (
    Piece,
    RemoteEngine,
    ReplyCall,
    Request,
    Summary,
    chat_messages,
    exact_request,
    served_models,
    server_model_info,
    tool_definitions,
)
from chat.engine.remote.http import ServerHttp
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
from chat.engine.remote.sampled_ids import SPELLING_CACHE, Remembered, SampledReplies
from chat.engine.token_probs import TOP_N
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import ServerError, ServerRefusedError
from chat.json_numbers import finite_number
from chat.settings.schema import SamplingSettings

_COUNT_CACHE = 256
"""Tokenized chats remembered (the meter asks for the same often)."""
_REFUSAL_STATUSES = frozenset({400, 404, 405, 422, 501})
"""Answers of `/v1/completions` that may mean it takes no token-id prompt;
whether they do is told by the chat API answering the same conversation."""
_log = logging.getLogger(__name__)


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
        self.reuse_note: str | None = None
        """None while replies can go back as their sampled ids; else why
        they go as text (the server refuses token-id prompts)."""
        self._sampled = SampledReplies(self._detokenized, None)
        self._counts: Remembered[str, list[int]] = Remembered(_COUNT_CACHE)
        self._openings: Remembered[bytes, tuple[int, bytes]] = Remembered(SPELLING_CACHE)
        self._texts: Remembered[str, list[int]] = Remembered(SPELLING_CACHE)

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        shown = chat_messages(messages)
        tokens = self._tokenized(shown, add_generation_prompt, tools)
        # With tools the chat API renders and tokenizes the text: no ids spliced.
        if tools or self.reuse_note is not None:
            return tokens
        # A reply sent whole with its thinking is not what the template writes.
        sampled = self._sampled.of(messages, allow_whole=False)
        return self._spliced(shown, tokens, sampled) if sampled else tokens

    def _tokenized(
        self,
        shown: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        """The chat as the server renders and tokenizes it (text only)."""
        body = self._chat_body(shown, add_generation_prompt, tools)
        key = json.dumps(body)
        known = self._counts.get(key)
        if known is None:
            known = self._tokens(body, "the chat")
            self._counts.put(key, known)
        return list(known)

    def _chat_body(
        self,
        shown: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: Sequence[ToolDefinition] = (),
    ) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": shown,
            "add_generation_prompt": add_generation_prompt,
            "add_special_tokens": False,
            **self._template_options(),
            **({"tools": tool_definitions(tools)} if tools else {}),
        }

    def _opening(self, shown: list[dict[str, Any]], index: int) -> tuple[int, bytes]:
        """The prompt reply `index` was sampled from (the chat before it and
        the generation prompt): its length and digest (`_TokenDigest`), which
        are all that is kept of it (a long conversation has one per reply)."""
        body = self._chat_body(shown[:index], True)
        key = hashlib.sha256(json.dumps(body).encode()).digest()
        known = self._openings.get(key)
        if known is None:
            tokens = self._tokens(body, "the chat")
            digest = _TokenDigest()
            digest.update(tokens)
            known = (len(tokens), digest.digest())
            self._openings.put(key, known)
        return known

    def _text_tokens(self, text: str) -> list[int]:
        """`text` alone as the server tokenizes it (nothing added)."""
        known = self._texts.get(text)
        if known is None:
            body = {"model": self.model, "prompt": text, "add_special_tokens": False}
            known = self._tokens(body, "a reply")
            self._texts.put(text, known)
        return known

    def _tokens(self, body: dict[str, Any], what: str) -> list[int]:
        answer = self._http.post_json("/tokenize", body)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise ServerError(f"The vLLM server at {self._http.url} did not tokenize {what}.")
        return tokens

    def _detokenized(self, ids: list[int]) -> str | None:
        try:
            answer = self._http.post_json(
                "/detokenize", {"model": self.model, "tokens": ids}, missing_ok=True
            )
        except ServerRefusedError:
            return None  # ids it does not know (another model's)
        spelled = answer.get("prompt") if isinstance(answer, dict) else None
        return spelled if isinstance(spelled, str) else None

    def _spliced(
        self, shown: list[dict[str, Any]], tokens: list[int], sampled: dict[int, list[int]]
    ) -> list[int]:
        """`tokens` (the chat tokenized as text) with each reply of `sampled`
        as its ids, where the reply's text is found as the module says: its
        tokens right after the prompt it was sampled from."""
        spliced: list[int] = []
        done = 0  # how much of `tokens` is in `spliced`
        head = _TokenDigest()  # of tokens[:head.size]
        for index in sorted(sampled):
            start, opening = self._opening(shown, index)
            text = self._text_tokens(shown[index]["content"])
            end = start + len(text)
            if start < max(done, head.size) or not text or tokens[start:end] != text:
                continue  # written otherwise: this reply goes as text
            head.update(tokens[head.size : start])
            if head.digest() != opening:
                continue
            spliced += tokens[done:start] + sampled[index]
            done = end
        return spliced + tokens[done:]

    def _template_options(self) -> dict[str, Any]:
        # The prompt is rendered by the server: thinking is turned off in the
        # template itself (a template without the switch ignores it).
        return {} if self.thinking else {"chat_template_kwargs": {"enable_thinking": False}}

    def _prepare(
        self, messages: ChatMessages, sampling: SamplingSettings, tools: Sequence[ToolDefinition]
    ) -> Request:
        # The messages too: for tools, or a server that takes no token-id prompt.
        counted = exact_request(self.tokenize_chat(messages, tools=tools), self.info.n_ctx)
        return Request(counted.tokens, chat_messages(messages), tool_definitions(tools))

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
        if call.request.tools or self.reuse_note is not None:
            yield from self._chat_pieces(call, body)
            return
        started = False
        try:
            for item in self._completion_pieces(call, dict(body)):
                started = True
                yield item
        except ServerRefusedError as refusal:
            if started or refusal.status not in _REFUSAL_STATUSES:
                raise
            # The same conversation through the chat API: if that fails too,
            # its error is the one to tell (the conversation is at fault).
            pieces = self._chat_pieces(call, body)
            first = next(pieces, None)
            self._refuse_token_prompts(refusal)
            if first is not None:
                yield first
                yield from pieces

    def _refuse_token_prompts(self, refusal: ServerRefusedError) -> None:
        self.reuse_note = (
            f"The vLLM server at {self._http.url} does not take token-id prompts at "
            f"/v1/completions ({refusal.status}): replies go back as text, through its "
            "chat API, and its prefix cache may read earlier replies again."
        )
        _log.info("%s", self.reuse_note)

    def _completion_pieces(
        self, call: ReplyCall, body: dict[str, Any]
    ) -> Generator[Piece | Summary, None, None]:
        """The reply from `/v1/completions`, one piece a sampled token where
        the server says the ids (`return_token_ids`)."""
        body["return_token_ids"] = True
        if call.record_probs:
            body["logprobs"] = TOP_N
        summary = Summary()
        ended = False
        for choice, usage in stream_choices(self._http, "/v1/completions", body, call.cancel):
            usage_summary(usage, summary)
            if choice is None:
                continue
            text = choice.get("text")
            pieces = list(_choice_pieces(text, choice, call)) if isinstance(text, str) else []
            reason, stopped_by = choice.get("finish_reason"), choice.get("stop_reason")
            # The end-of-turn (or stop) token comes last, without text: it is
            # not part of the reply.
            if reason == "stop" and not isinstance(stopped_by, str) and _ends_textless(pieces):
                pieces.pop()
            yield from pieces
            if reason is not None:
                finish_of(choice, summary)
                # A stop string cuts the text mid-token: the ids would not spell it.
                summary.clean_ids = not isinstance(stopped_by, str)
                ended = True
        if ended:
            yield summary
        elif not call.cancel.is_set():
            raise ServerError(f"The vLLM server at {self._http.url} ended the reply unfinished.")

    def _chat_pieces(
        self, call: ReplyCall, body: dict[str, Any]
    ) -> Generator[Piece | Summary, None, None]:
        """A reply through the chat API (one that may call a tool, or from a
        server that takes no token-id prompt), with the messages counted."""
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


class _TokenDigest:
    """A digest of a token list that grows: one pass over a long prompt
    checks where each reply's opening prompt ends, without keeping them."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.size = 0

    def update(self, tokens: list[int]) -> None:
        self._hash.update("".join(f"{t}," for t in tokens).encode())
        self.size += len(tokens)

    def digest(self) -> bytes:
        return self._hash.copy().digest()


def _ends_textless(pieces: list[Piece]) -> bool:
    """Whether the last of `pieces` is a token id that came without text."""
    return bool(pieces) and pieces[-1].known_id and not pieces[-1].text


def _choice_pieces(text: str, choice: dict[str, Any], call: ReplyCall) -> Iterator[Piece]:
    """A completions chunk as pieces: one per token id it carries (the text
    with the first), else one per logprobs entry, else its text."""
    steps = _completion_logprobs(choice.get("logprobs"), call.sampling, call.record_probs)
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids and all(type(i) is int and i >= 0 for i in ids):
        for i, token_id in enumerate(ids):
            step = steps[i] if i < len(steps) else None
            yield Piece(text if i == 0 else "", token_id, True, step)
        return
    if not steps:
        if text:
            yield Piece(text)
        return
    for i, step in enumerate(steps):
        yield Piece(text if i == 0 else "", choice=step)


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
    number = finite_number(value)
    return number if number is not None else float("-inf")
