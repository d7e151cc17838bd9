"""llama.cpp's llama-server: exact counts, the server's own figures.

Counting exactly what the model sees: the conversation is rendered by the
server's chat template (`POST /apply-template`) and tokenized by its tokenizer
(`POST /tokenize`, with `add_special` and `parse_special` as its own chat
endpoint tokenizes a rendered prompt), and the reply is asked for with exactly
those token ids (`POST /completion` takes a token array and adds nothing to
it). `cache_prompt` keeps the longest common prefix in the slot, so a turn
evaluates only what is new; `timings_per_token` makes every event carry the
prompt figures (`prompt_n` evaluated, `cache_n` reused), so that even a
cancelled reply knows them.

The window is the slot's: `default_generation_settings.n_ctx` in `GET /props`
(the `-c` given divided among `--parallel` slots).

A conversation that ends with a reply, counted without the generation prompt
(`add_generation_prompt=False`, the context meter's per-message counts), is
rendered by llama-server as a reply to be continued ("prefill assistant"):
without its end-of-turn marker. `_render_finished_reply` puts the marker back
(found as the server's `eos_token`); the prompts sent always end with the
generation prompt and need none of this.

A reply that carries the ids it was sampled as (`ChatMessage.token_ids`,
saved with it) goes back as those ids, not as its text: tokenized again, the
text can come out otherwise (the demo model samples `\n\n` as one token, and
its tokenizer makes two of it), and the slot's cache match would end there.
The ids are used only when the server's `/detokenize` spells them as exactly
the reply's text (not so for an edited reply, another model's ids, a damaged
row) and the template writes that text unchanged right after the generation
prompt. `/tokenize` takes the prompt as a mix of text pieces and ids (each
text piece tokenized on its own), so the count the meter shows and the ids
sent are the same list.

Tools go through llama-server's chat API, which needs `--jinja` (the default
in recent builds; `--no-jinja` turns it off): the conversation, with the
calls and results in it, and the `tools` go to `/v1/chat/completions`, whose
stream carries the calls as OpenAI's `tool_calls` deltas (the server reads
them from the model's output with the parser it picked for the template, and
with `tool_choice` "required" samples a call under a grammar of the tools'
schemas). `/apply-template` renders the same messages and tools with the same
template, so the count is still the server's own. The chat API tokenizes the
rendered text: earlier replies go in as text there, not as their sampled
ids. Whether tools can go at all is asked when connecting: `/props` says
whether the template renders tools (`chat_template_caps.supports_tools`), and
an `/apply-template` with a tool fails without `--jinja`.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from chat.conversations.conversation import FinishReason
from chat.engine.protocol import ChatMessages, PromptProgress
from chat.engine.reasoning.budget import ThinkingBudget, forced_choice
from chat.engine.reasoning.markers import (
    Reasoning,
    find_markers,
    find_switch,
    first_prompt_opens_block,
)
from chat.engine.remote.engine import (
    Piece,
    RemoteEngine,
    ReplyCall,
    Request,
    Summary,
    chat_messages,
    exact_request,
    out_of_bounds_note,
    served_models,
    server_model_info,
    shown_names,
    tool_definitions,
    window_size,
)
from chat.engine.remote.http import ServerHttp, parse_json_line, sse_data
from chat.engine.remote.openai import (
    ASSUMED_N_CTX,
    chat_pieces,
    llama_sampling,
    openai_sampling,
    tools_body,
)
from chat.engine.remote.probs import token_choice
from chat.engine.remote.sampled_ids import SPELLING_CACHE, SampledReplies
from chat.engine.token_probs import TOP_N
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import KvchatError, ServerError, UnknownServerModelError
from chat.json_numbers import finite_number, is_count
from chat.settings.schema import SamplingSettings

_COUNT_CACHE = 256
"""Tokenized conversations remembered (the meter asks for the same often)."""
_NEXT_MESSAGE = "\ue000kvchat next message\ue001"
"""A user message's text no conversation has (private-use characters)."""
MixedPrompt = list[str | int]
"""A prompt as `/tokenize` and `/completion` take it: text pieces and token ids."""
_STOP_TYPES: dict[str, FinishReason] = {"eos": "done", "word": "done", "limit": "max_tokens"}
_PROBE_TOOL = ToolDefinition("kvchat_probe", "Checks that tools can be rendered.")


class LlamaServerEngine(RemoteEngine):
    # Set per model in __init__: all three thinking settings for a model that
    # does not think, "thinking" when its template has no switch. The budget
    # and earlier thinking kept are kvchat's own work here, as for a local
    # model (`_pieces`, `_spliced`).
    ignored_settings: frozenset[str] = frozenset()

    def __init__(self, http: ServerHttp, props: dict[str, Any], models: Any) -> None:
        super().__init__(http)
        settings = props.get("default_generation_settings")
        reported = settings.get("n_ctx") if isinstance(settings, dict) else None
        n_ctx = window_size(reported)
        if n_ctx is None and reported is None:
            raise ServerError(f"The llama-server at {http.url} did not say its context size.")
        source, known = "llama-server /props (per slot)", n_ctx is not None
        if n_ctx is None:  # a figure no slot has: the window is not known
            n_ctx = ASSUMED_N_CTX
            source = f"unknown: {out_of_bounds_note(reported)}; {ASSUMED_N_CTX:,} assumed"
        name, n_ctx_train = _model_name(props, models)
        _check_model(http, name, models)
        self.info = server_model_info(
            http,
            name,
            "llama-server",
            n_ctx,
            source,
            n_ctx_train=n_ctx_train,
            n_ctx_known=known,
            continues_replies=True,  # a prompt of token ids: see _prepare_continuation
        )
        eos = props.get("eos_token")
        self._eos = eos if isinstance(eos, str) else ""
        # Replies come from /completion as the model wrote them, markers and
        # all: the thinking is told from the answer as for a local model.
        self.info = replace(self.info, reasoning=self._reasoning(props))
        no_tools = self._no_tools_reason(props)
        self.info = replace(self.info, api_tool_calls=no_tools is None, no_tools_reason=no_tools)
        self._reasoning_on = self.info.reasoning
        if self.info.reasoning is None:
            self.ignored_settings = frozenset({"thinking", "thinking_budget", "keep_thinking"})
        elif self.info.reasoning.switch is None:
            self.ignored_settings = frozenset({"thinking"})
        self.grammar: str | None = None
        """A GBNF grammar replies are sampled under, as the local engine's
        (the tests make the demo model think with one)."""
        self.answer_grammar: str | None = None
        """The grammar the answer is sampled under after a thinking budget
        closed the block (as the local engine's)."""
        self._n_vocab = _vocab_size(models)
        self._counts: OrderedDict[str, list[int]] = OrderedDict()
        self._sampled = SampledReplies(self._detokenized, self._n_vocab)
        self._counts_lock = threading.Lock()
        self._opening: str | None = None
        self._opening_known = False
        self._defused: OrderedDict[str, str] = OrderedDict()

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        shown = self._api_messages(messages)
        # With tools the chat API renders and tokenizes the text: no ids spliced.
        sampled = {} if tools else self._sampled_replies(messages)
        whole = sorted(i for i in sampled if messages[i].get("sampled_whole"))
        offered = tool_definitions(tools)
        key = json.dumps(
            [shown, add_generation_prompt, sorted(sampled.items()), whole, self._template_options()]
            + ([offered] if offered else [])
        )
        with self._counts_lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return list(self._counts[key])
        prompt: str | MixedPrompt | None = None
        if sampled:
            prompt = self._spliced(shown, sampled, add_generation_prompt, bool(whole))
        if prompt is None:
            prompt = self._rendered(shown, add_generation_prompt, offered)
        answer = self._http.post_json(
            "/tokenize", {"content": prompt, "add_special": True, "parse_special": True}
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise ServerError(f"The llama-server at {self._http.url} did not tokenize the chat.")
        with self._counts_lock:
            self._counts[key] = tokens
            if len(self._counts) > _COUNT_CACHE:
                self._counts.popitem(last=False)
        return list(tokens)

    def _api_messages(self, messages: ChatMessages) -> list[dict[str, Any]]:
        """The messages as the template gets them, each tool's result defused."""
        shown = chat_messages(messages)
        for item in shown:
            if item["role"] == "tool":
                item["content"] = self._defuse(item["content"])
        return shown

    def _defuse(self, text: str) -> str:
        """A tool's result (a stranger's text) with a zero-width space after
        the first character of each piece the server's tokenizer reads as a
        special token (`<|im_end|>`), as the local engine does: the server
        tokenizes the rendered prompt with special tokens parsed, and the
        result must not close its message and write another."""
        with self._counts_lock:
            if text in self._defused:
                self._defused.move_to_end(text)
                return self._defused[text]
        # A piece is special when, tokenized as plain text, it is not itself:
        # asked only of the pieces the plain tokenization of the whole lacks.
        pieces = self._tokens(text, parse_special=True, with_pieces=True)
        ordinary = {t for t in self._tokens(text, parse_special=False) if type(t) is int}
        specials = set()
        for piece in pieces:
            if not isinstance(piece, dict) or piece.get("id") in ordinary:
                continue
            piece_text = piece.get("piece")
            if (
                isinstance(piece_text, str)
                and len(piece_text) > 1
                and self._tokens(piece_text, parse_special=False) != [piece["id"]]
            ):
                specials.add(piece_text)
        defused = text
        for special in sorted(specials, key=len, reverse=True):
            defused = defused.replace(special, special[0] + "\u200b" + special[1:])
        with self._counts_lock:
            self._defused[text] = defused
            if len(self._defused) > SPELLING_CACHE:
                self._defused.popitem(last=False)
        return defused

    def _tokens(self, text: str, *, parse_special: bool, with_pieces: bool = False) -> list[Any]:
        """`/tokenize` of `text` alone (no BOS): ids, or {id, piece} entries."""
        answer = self._http.post_json(
            "/tokenize",
            {"content": text, "parse_special": parse_special, "with_pieces": with_pieces},
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise ServerError(f"The llama-server at {self._http.url} did not tokenize a result.")
        return tokens

    def _rendered(
        self,
        shown: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        if not add_generation_prompt and shown and shown[-1]["role"] == "assistant":
            return self._render_finished_reply(shown, tools)
        return self._render(shown, add_generation_prompt, tools)

    def _no_tools_reason(self, props: dict[str, Any]) -> str | None:
        """Why this server cannot take tools, in a sentence; None when it can:
        its template renders them (as `/props` reports) and it renders with
        Jinja (an `/apply-template` with a tool fails without `--jinja`)."""
        url = self._http.url
        caps = props.get("chat_template_caps")
        if isinstance(caps, dict) and caps.get("supports_tools") is False:
            return (
                f"The model at {url} cannot call tools: its chat template, as llama-server "
                "reports it, does not render tools."
            )
        try:
            self._render([{"role": "user", "content": "x"}], True, tool_definitions([_PROBE_TOOL]))
        except ServerError as error:
            if "jinja" in str(error):
                return (
                    f"The llama-server at {url} cannot pass tools to the model: it was started "
                    "without --jinja (restart it with --jinja)."
                )
            return f"The llama-server at {url} cannot render tools: {error}"
        return None

    def _sampled_replies(self, messages: ChatMessages) -> dict[int, list[int]]:
        """The replies of `messages` that go in as their sampled ids, by
        index (`SampledReplies.of`); none when the server does not say its
        vocabulary (ids outside it would make it refuse the prompt)."""
        if self._n_vocab is None:
            return {}
        return self._sampled.of(messages)

    def _detokenized(self, ids: list[int]) -> str | None:
        answer = self._http.post_json("/detokenize", {"tokens": ids}, missing_ok=True)
        spelled = answer.get("content") if isinstance(answer, dict) else None
        return spelled if isinstance(spelled, str) else None

    def _spliced(
        self,
        shown: list[dict[str, str]],
        sampled: dict[int, list[int]],
        add_generation_prompt: bool,
        whole: bool = False,
    ) -> MixedPrompt | None:
        """The prompt with each reply of `sampled` as its ids: the template
        renders a placeholder in each one's place, the text around it goes as
        text. None (the text is sent) when the template does not write those
        replies' text unchanged right after the generation prompt. `whole`:
        some go in whole, thinking included, which is not what the template
        writes of them (it drops their thinking, on purpose)."""
        opening = self._reply_opening()
        if not opening:
            return None
        marked = [
            {**m, "content": _reply_placeholder(i)} if i in sampled else m
            for i, m in enumerate(shown)
        ]
        layout = self._rendered(marked, add_generation_prompt)
        text = "" if whole else self._rendered(shown, add_generation_prompt)
        parts: MixedPrompt = []
        spelled = ""  # the text the parts stand for
        for i, ids in sampled.items():
            before, found, layout = layout.partition(_reply_placeholder(i))
            if not found or not before.endswith(opening):
                return None
            parts += [before, *ids]
            spelled += before + shown[i]["content"]
        if not whole and spelled + layout != text:
            return None
        if layout:
            parts.append(layout)
        return parts

    def _reply_opening(self) -> str | None:
        """What the generation prompt adds after the last message
        (`<|im_start|>assistant\n` in ChatML), when the template writes a
        reply's text right after it in the history; else None. Asked of the
        server once."""
        if self._opening_known:
            return self._opening
        ask = [{"role": "user", "content": "x"}]
        answered = [*ask, {"role": "assistant", "content": _reply_placeholder(0)}]
        asked = self._render(ask, True)
        closed = self._render(ask, False)
        history = self._render([*answered, {"role": "user", "content": "y"}], False)
        opening = None
        if asked.startswith(closed) and history.startswith(asked + _reply_placeholder(0)):
            opening = asked[len(closed) :] or None
        self._opening, self._opening_known = opening, True
        return opening

    def _reasoning(self, props: dict[str, Any]) -> Reasoning | None:
        """How the served model thinks, from the chat template /props gives,
        and whether its generation prompt opens the block (rendered by the
        server); None when it does not think."""
        template = props.get("chat_template")
        found = find_markers(template if isinstance(template, str) else None)
        if found is None:
            return None
        markers, where = found
        try:
            opens = first_prompt_opens_block(lambda shown: self._render(shown, True), markers)
        except ServerError:
            opens = False  # the first turn says what is wrong with the server
        return Reasoning(markers, where, opens, find_switch(template))

    def set_thinking(self, enabled: bool) -> None:
        super().set_thinking(enabled)
        reasoning = self._reasoning_on
        if reasoning is None or reasoning.switch is None:
            return
        # With the switch off the generation prompt closes the block (an empty
        # one): no request needed to know it does not open it.
        off = replace(reasoning, enabled=False, prompt_opens_block=False)
        self.info = replace(self.info, reasoning=reasoning if enabled else off)

    def _template_options(self) -> dict[str, Any]:
        reasoning = self.info.reasoning
        return reasoning.options if reasoning is not None else {}

    def _render(
        self,
        shown: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        options = self._template_options()
        kwargs: dict[str, Any] = {"chat_template_kwargs": options} if options else {}
        if tools:
            kwargs["tools"] = tools
        rendered = self._http.post_json(
            "/apply-template",
            {"messages": shown, "add_generation_prompt": add_generation_prompt, **kwargs},
        )
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise ServerError(f"The llama-server at {self._http.url} did not render the chat.")
        return prompt

    def _render_finished_reply(
        self, shown: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """`shown`, ending with a finished reply, rendered as the next prompt
        will hold it. llama-server renders a last reply as one to continue
        (open, without its end-of-turn marker), so a user message is added
        and cut off again: after the reply's text, up to and including the
        end-of-turn token and the whitespace after it (`<|im_end|>\n`).
        Without an end-of-turn token to find, the open rendering is used."""
        opened = self._render(shown, False, tools)
        if not self._eos:
            return opened
        next_message = {"role": "user", "content": _NEXT_MESSAGE}
        followed = self._render([*shown, next_message], False, tools)
        before_next = followed.find(_NEXT_MESSAGE)
        reply = shown[-1]["content"]
        reply_end = followed.rfind(reply, 0, before_next) + len(reply) if reply else len(opened)
        eos = followed.find(self._eos, reply_end, before_next)
        if not followed.startswith(opened) or eos < 0:
            return opened
        end = eos + len(self._eos)
        while end < before_next and followed[end].isspace():
            end += 1
        return followed[:end]

    def _prepare(
        self, messages: ChatMessages, sampling: SamplingSettings, tools: Sequence[ToolDefinition]
    ) -> Request:
        return self._counted_request(messages, tools)

    def _prepare_continuation(self, messages: ChatMessages) -> Request:
        """The prompt the reply was sampled from (the conversation before it,
        and the generation prompt), then the reply: as its sampled ids when
        they spell it (a reply that thought is sent whole, `sampled_whole`:
        then the slot's cache holds all of it), else its text tokenized. So a
        reply cut inside its thought goes on inside it."""
        if not messages or messages[-1].get("role") != "assistant":
            raise KvchatError("Only a reply can be continued.")
        *history, reply = messages
        prompt = self.tokenize_chat(history, True)
        ids = self._sampled_replies([reply]).get(0)
        if ids is None:
            ids = [piece.token_id for piece in self._text_pieces(str(reply["content"]), False)]
        return exact_request([*prompt, *ids], self.info.n_ctx)

    def _body(
        self, tokens: list[int], sampling: SamplingSettings, grammar_text: str | None = None
    ) -> dict[str, Any]:
        grammar = {"grammar": grammar_text} if grammar_text else {}
        return {
            "prompt": tokens,
            "cache_prompt": True,
            **openai_sampling(sampling, max_tokens="n_predict"),
            **llama_sampling(sampling),
            "mirostat": sampling.mirostat_mode,
            "mirostat_tau": sampling.mirostat_tau,
            "mirostat_eta": sampling.mirostat_eta,
            **grammar,
        }

    def _pieces(self, call: ReplyCall) -> Generator[Piece | Summary | PromptProgress, None, None]:
        """The reply; with a thinking budget, the stream is stopped once the
        thinking reaches it, and the reply goes on in a second request: the
        prompt, the tokens sampled so far and the closing marker's, which the
        slot's cache holds but for the last ones (as the local engine does it,
        chat.engine.reasoning.budget)."""
        if call.request.tools:
            yield from self._chat_pieces(call)
            return
        closing: list[Piece] = []
        budget = self._thinking_budget(call, closing)
        if budget is None:
            yield from self._stream(call.request.tokens, call, self.grammar, Summary())
            return
        sampled: list[int] = []
        first = Summary()
        stream = self._stream(call.request.tokens, call, self.grammar, first)
        try:
            for item in stream:
                if isinstance(item, Summary):
                    yield item
                    return
                if isinstance(item, PromptProgress):
                    yield item
                    continue
                sampled.append(item.token_id)
                yield item
                room = call.sampling.max_tokens - len(sampled)
                if budget.feed(item.text) and len(closing) < room:
                    break
                closing.clear()
            else:
                return  # cancelled
        finally:
            stream.close()
        yield from closing
        sampled += [piece.token_id for piece in closing]
        rest = replace(call.sampling, max_tokens=call.sampling.max_tokens - len(sampled))
        prompt = [*call.request.tokens, *sampled]
        for item in self._stream(prompt, call, self.answer_grammar, Summary(), rest):
            if isinstance(item, Summary):
                # The prompt's figures are the first request's; the rate is
                # measured over both (kvchat's own count).
                item.prompt_tokens = first.prompt_tokens
                item.prompt_evaluated = first.prompt_evaluated
                item.decode_tps = None
            yield item

    def _thinking_budget(self, call: ReplyCall, closing: list[Piece]) -> ThinkingBudget | None:
        """The budget a reply's thinking runs under (the model thinks, with
        thinking on); the closing marker's tokens go into `closing`."""
        reasoning = self.info.reasoning
        most = call.sampling.thinking_budget
        if not most or reasoning is None or not reasoning.enabled:
            return None

        def tokenize(text: bytes) -> list[int]:
            closing[:] = self._text_pieces(text.decode("utf-8"), call.record_probs)
            return [piece.token_id for piece in closing]

        return ThinkingBudget(reasoning, most, tokenize)

    def _text_pieces(self, text: str, record_probs: bool) -> list[Piece]:
        """`text` (a closing marker, a reply) as the server tokenizes it, one
        piece a token (recorded, when probabilities are, as chosen for certain)."""
        answer = self._http.post_json(
            "/tokenize",
            {"content": text, "add_special": False, "parse_special": True, "with_pieces": True},
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise ServerError(f"The llama-server at {self._http.url} did not tokenize text.")
        pieces = []
        for token in tokens:
            token_id = token.get("id") if isinstance(token, dict) else token
            piece = token.get("piece") if isinstance(token, dict) else None
            if type(token_id) is not int or token_id < 0:
                raise ServerError(f"The llama-server at {self._http.url} did not tokenize text.")
            pieces.append(Piece(piece if isinstance(piece, str) else "", token_id, True))
        if pieces and "".join(piece.text for piece in pieces) != text:
            # A server without `with_pieces`, or a piece that is not whole UTF-8.
            pieces = [replace(p, text=text if i == 0 else "") for i, p in enumerate(pieces)]
        if record_probs:
            pieces = [replace(p, choice=forced_choice(p.token_id, p.text)) for p in pieces]
        return pieces

    def _stream(
        self,
        prompt: list[int],
        call: ReplyCall,
        grammar: str | None,
        summary: Summary,
        sampling: SamplingSettings | None = None,
    ) -> Generator[Piece | Summary | PromptProgress, None, None]:
        """One `/completion` request's stream, its figures read into `summary`
        as they come (every event carries them), and how far the server has
        read the prompt (`return_progress`: an event at each batch)."""
        sampling = sampling or call.sampling
        body = self._body(prompt, sampling, grammar)
        body |= {
            "stream": True,
            "return_tokens": True,
            "timings_per_token": True,
            "return_progress": True,
        }
        if call.record_probs:
            body["n_probs"] = TOP_N
        url = self._http.url
        # The end-of-turn token comes as an event of its own with no text; it
        # is not part of the reply. A textless piece is held until the next
        # event says whether it was that one.
        held: Piece | None = None
        with self._http.stream("/completion", body, call.cancel) as lines:
            for payload in sse_data(lines):
                event = parse_json_line(payload, url)
                progress = event.get("prompt_progress")
                if isinstance(progress, dict):  # its "tokens" are no reply's
                    read = _prompt_read(progress)
                    if read is not None:
                        yield read
                    continue
                _read_timings(event, summary)
                content = event.get("content")
                tokens = event.get("tokens")
                if not isinstance(content, str) or not isinstance(tokens, list):
                    raise ServerError(f"The llama-server at {url} sent an event of another shape.")
                if event.get("stop") is True:
                    stop_type = str(event.get("stop_type", ""))
                    if held is not None and stop_type != "eos":
                        yield held
                    summary.finish = _STOP_TYPES.get(stop_type, "done")
                    # A stop word cuts the text mid-way: its ids would not spell it.
                    summary.clean_ids = stop_type in ("eos", "limit")
                    seed = _nested(event, "generation_settings", "seed")
                    if type(seed) is int and 0 <= seed < 2**32 - 1:
                        summary.seed = seed
                    yield summary
                    return
                probs = event.get("completion_probabilities")
                for i, token_id in enumerate(tokens):
                    choice = None
                    if call.record_probs and isinstance(probs, list) and i < len(probs):
                        choice = _choice(probs[i], sampling)
                    known = type(token_id) is int and token_id >= 0
                    text = content if i == 0 else ""  # the text comes with the first id
                    piece = Piece(text, token_id if known else 0, known, choice)
                    if held is not None:
                        yield held
                        held = None
                    if piece.text:
                        yield piece
                    else:
                        held = piece
        if held is not None:
            yield held
        if not call.cancel.is_set():
            raise ServerError(f"The llama-server at {url} ended the reply without its figures.")

    def _chat_pieces(self, call: ReplyCall) -> Generator[Piece | Summary, None, None]:
        """A reply that may call a tool, from the chat API: the same sampling
        as `/completion`'s, the messages and tools instead of the ids. The
        thinking stays in the text with its markers (`reasoning_format`
        "none"), as `/completion` gives it, for the same splitter."""
        body = self._body([], call.sampling)
        del body["prompt"]
        body.pop("grammar", None)  # llama-server refuses a grammar beside tools
        options = self._template_options()
        body |= {
            "messages": call.request.messages,
            **tools_body(call.request, self.tool_choice),
            "stream": True,
            "stream_options": {"include_usage": True},
            "timings_per_token": True,
            "reasoning_format": "none",
            **({"chat_template_kwargs": options} if options else {}),
        }
        summary = Summary(clean_ids=False)
        yield from chat_pieces(
            self._http, "/v1/chat/completions", body, call, summary, _read_timings
        )

    def prefill(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        exact: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> bool:
        """Evaluate the prompt into the slot's cache (`n_predict` 0): a reply
        sent next with the same prompt evaluates only what is new."""
        if not add_generation_prompt or not self._lock.acquire(blocking=False):
            return False
        self._prefilling = True
        self._stop_prefill.clear()
        try:
            if self._closed:
                return False
            tokens = self.tokenize_chat(messages, tools=tools)
            if len(tokens) >= self.info.n_ctx:
                return False
            # Streamed, for its headers come at once: until then there is no
            # connection to shut down, and Esc on a reply waiting for this
            # one (`_acquire_for_reply`) would wait for the whole prompt.
            body = {"prompt": tokens, "n_predict": 0, "cache_prompt": True, "stream": True}
            with self._http.stream("/completion", body, self._stop_prefill) as lines:
                for _ in lines:
                    pass
            return not self._stop_prefill.is_set()
        except ServerError:
            return False
        finally:
            self._lock.release()
            self._prefilling = False


def _prompt_read(progress: dict[str, Any]) -> PromptProgress | None:
    """llama-server's `prompt_progress` ({"total", "cache", "processed",
    "time_ms"}) as the engine's progress over the part not cached; None
    for figures of another shape (a server's word is not trusted)."""
    names = ("total", "cache", "processed", "time_ms")
    if not all(type(progress.get(name)) is int and 0 <= progress[name] < 1 << 40 for name in names):
        return None
    total, cache, processed, time_ms = (progress[name] for name in names)
    new = total - cache
    # Read so far: counted with the cached part (what this build sends) or
    # without it.
    done = processed - cache if processed >= cache else processed
    if not 0 <= done <= new:
        return None
    return PromptProgress(done, new, time_ms / 1000)


def _model_name(props: dict[str, Any], models: Any) -> tuple[str, int | None]:
    """The served model's name (its alias, else the file's stem) and training window."""
    n_ctx_train = None
    entries = models.get("data") if isinstance(models, dict) else None
    if isinstance(entries, list) and entries and isinstance(entries[0], dict):
        value = _nested(entries[0], "meta", "n_ctx_train")
        n_ctx_train = window_size(value)
    alias = props.get("model_alias")
    path = props.get("model_path")
    if isinstance(path, str) and path and (not isinstance(alias, str) or alias == path):
        return Path(path).stem, n_ctx_train
    if isinstance(alias, str) and alias:
        return alias, n_ctx_train
    return "llama-server model", n_ctx_train


def _check_model(http: ServerHttp, name: str, models: Any) -> None:
    """llama-server serves one model: asking for another is a mistake to say
    (by its alias, its file's path, or the file's name without .gguf)."""
    wanted = http.config.model
    served = [e["id"] for e in served_models(models)]
    names = {name, *served, *(Path(s).stem for s in served)}
    if wanted is not None and wanted not in names:
        shown = shown_names(served or [name])
        raise UnknownServerModelError(
            f"The llama-server at {http.url} does not serve the model {wanted!r}; "
            f"it serves: {', '.join(shown)}.",
            tuple(shown),
        )


def _vocab_size(models: Any) -> int | None:
    """The served model's vocabulary size (`/v1/models`' `meta.n_vocab`):
    ids outside it are never sent (the server would refuse the prompt)."""
    entries = models.get("data") if isinstance(models, dict) else None
    if isinstance(entries, list) and entries and isinstance(entries[0], dict):
        value = _nested(entries[0], "meta", "n_vocab")
        if type(value) is int and value > 0:
            return value
    return None


def _reply_placeholder(index: int) -> str:
    """Text a template renders in place of message `index`'s content, to find
    where that content goes (private-use characters: no message has them)."""
    return f"\ue000kvchat reply {index}\ue001"


def _nested(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _read_timings(event: dict[str, Any], summary: Summary) -> None:
    timings = event.get("timings")
    if not isinstance(timings, dict):
        return
    prompt_n, cache_n = timings.get("prompt_n"), timings.get("cache_n")
    if is_count(prompt_n) and is_count(cache_n):
        summary.prompt_evaluated = prompt_n
        summary.prompt_tokens = prompt_n + cache_n
    # predicted_n counts the end-of-turn token too: the reply's own count is
    # the tokens streamed.
    predicted_n, tps = timings.get("predicted_n"), timings.get("predicted_per_second")
    tps = finite_number(tps)
    if tps is not None and tps >= 0 and is_count(predicted_n) and predicted_n > 1:
        summary.decode_tps = tps


def _choice(step: Any, sampling: SamplingSettings) -> Any:
    if not isinstance(step, dict):
        return None
    top = step.get("top_logprobs")
    alternatives = (
        [(str(t.get("token", "")), t.get("logprob")) for t in top if isinstance(t, dict)]
        if isinstance(top, list)
        else []
    )
    token_id = step.get("id")
    token_id = token_id if type(token_id) is int else 0
    first = top[0] if isinstance(top, list) and top and isinstance(top[0], dict) else None
    greedy = first.get("id") == token_id if first else None
    return token_choice(
        token_id, str(step.get("token", "")), step.get("logprob"), alternatives, sampling, greedy
    )
