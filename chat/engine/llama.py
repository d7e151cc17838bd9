"""The llama.cpp engine, through llama-cpp-python.

What it relies on about llama.cpp and llama-cpp-python, checked here, is in
docs/llama-cpp-facts.md. In short: load with `verbose=True` and route
llama.cpp's log to a file (chat.engine.llama_log; with `verbose=False`
llama-cpp-python redirects fd 1 and 2, which Textual draws on); render prompts
with the GGUF's own chat template and send token ids (chat.engine.chat_prompt),
so that the context meter counts exactly what the model sees; generate with
`Llama.generate`, which keeps the longest common prefix of the KV cache.

Beside it: the prompt batches and the span to evaluate (chat.engine.batches),
the KV cache copied out and in (chat.engine.kv_cache), thread counts measured
(chat.engine.threads).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import random
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from chat import paths
from chat.conversations.conversation import FinishReason, ReplyStats
from chat.engine import llama_log
from chat.engine.batches import PromptBatches, Span, chunks, timed_chunks
from chat.engine.chat_prompt import CHATML_TEMPLATE, ChatPrompt
from chat.engine.decode_threads import DecodeThreads
from chat.engine.kv_cache import copy_sequence, identity_of, load_sequence
from chat.engine.kv_state import KvState, StateIdentity, common_prefix
from chat.engine.llama_log import route_llama_log
from chat.engine.machine_load import others_in_the_way
from chat.engine.protocol import (
    ChatMessages,
    EngineEvent,
    Finished,
    ModelInfo,
    PromptProgress,
    TokenEvent,
)
from chat.engine.reasoning.budget import ThinkingBudget, forced_choice
from chat.engine.reasoning.markers import recognise, special_token_test, with_thinking
from chat.engine.reply_text import ReplyText
from chat.engine.threads import (
    CALIBRATION_FILLER,
    Measured,
    RememberedRates,
    ThreadCounts,
    choose_threads,
    measure,
    usable_cores,
)
from chat.engine.token_probs import Logits, StepRecorder
from chat.engine.tool_calls.calls import ToolCall, ToolDefinition
from chat.engine.tool_calls.grammar import call_grammar
from chat.engine.tool_calls.parser import ToolCallParser, ToolCallTextError
from chat.engine.tool_calls.syntax import find_syntax
from chat.errors import (
    EngineBusyError,
    EngineClosedError,
    ModelError,
    PromptTooLongError,
)
from chat.models.devices import compute_devices, device_label
from chat.models.files import check_gguf
from chat.sanitize import sanitize
from chat.settings.schema import ModelSettings, SamplingSettings, key_cache_type_for

__all__ = [
    "CHATML_TEMPLATE",
    "PREFILL_WAIT_S",
    "REBATCH_MOST",
    "LlamaEngine",
    "gpu_offload_supported",
    "key_cache_type",
    "load_engine",
    "route_llama_log",
]

# A reply sent while its prompt is being prefilled waits this long at most.
PREFILL_WAIT_S = 60.0

_CLOSED = "The model was unloaded; nothing more can be generated with it."


def gpu_offload_supported() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


_KEY_CACHE_GGML_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}


def key_cache_type(settings: ModelSettings) -> str:
    """The KV cache's key type for these settings: "auto" means q8_0 when every
    layer runs on the CPU (see KEY_CACHE_TYPES in chat.settings.schema for why), else
    llama.cpp's own f16."""
    on_cpu = not gpu_offload_supported() or settings.n_gpu_layers == 0
    return key_cache_type_for(settings.cache_type_k, on_cpu)


def load_engine(path: Path, settings: ModelSettings, log_path: Path) -> LlamaEngine:
    """Load a GGUF model. Raises `ModelError` with a sentence naming the file."""
    check_gguf(path)
    llama_log.route_llama_log(log_path)
    kwargs: dict[str, Any] = {
        "model_path": str(path),
        "n_ctx": settings.n_ctx,
        "n_gpu_layers": settings.n_gpu_layers,
        "n_batch": settings.n_batch,
        "flash_attn": settings.flash_attn,
        "type_k": _KEY_CACHE_GGML_TYPES[key_cache_type(settings)],
        # Loud on purpose: quiet mode dup2()s fds 1 and 2 away, which blanks a
        # running Textual app. Our log callback already keeps it off the screen.
        "verbose": True,
    }
    if settings.n_threads is not None:
        kwargs["n_threads"] = settings.n_threads
    if settings.n_threads_batch is not None:
        kwargs["n_threads_batch"] = settings.n_threads_batch
    llama_log.forget_errors()
    try:
        llm = llama_cpp.Llama(**kwargs)
    except (ValueError, RuntimeError, OSError, MemoryError) as error:
        reason = llama_log.recent_error() or str(error).strip() or type(error).__name__
        log_hint = "" if llama_log.log_problem() else f" llama.cpp's log is in {log_path}."
        raise ModelError(
            f"Could not load the model {path}: {reason.rstrip('.')}.{log_hint}"
        ) from error
    llm.verbose = False  # no per-call chatter on stderr from now on
    try:
        return LlamaEngine(llm, path, settings)
    except BaseException:
        llm.close()  # a chat template that cannot be used: free the model at once
        raise


def _prompt_tokens_evaluated(ctx: Any) -> int:
    """Tokens llama.cpp evaluated since the last perf reset.

    llama.cpp counts batches of one token as n_eval and larger ones as
    n_p_eval, and reports each count as at least 1 (to spare callers a division
    by zero); a count is real only when its time is non-zero.
    """
    perf = llama_cpp.llama_perf_context(ctx)
    batched = int(perf.n_p_eval) if perf.t_p_eval_ms > 0 else 0
    single = int(perf.n_eval) if perf.t_eval_ms > 0 else 0
    return batched + single


REBATCH_MOST = 64
"""The most tokens per batch when a reply is evaluated again in the background
(`rebatch_reply`): small, so that a reply sent or a state saved meanwhile
waits little (how a prompt is cut into batches of two or more does not change
its values)."""

REBATCH_BATCH_S = 0.1
"""And about how long each of those batches takes (`timed_chunks`): with
another program on both of a 2-core machine's cores 23 tokens took 0.40 s, so
64 about 1.1 s, more than leaving a conversation waits to save its state."""


class LlamaEngine:
    """One loaded model. Calls that use the llama.cpp context are serialized;
    `close` frees the model only once no call uses it."""

    def __init__(self, llm: Any, path: Path, settings: ModelSettings) -> None:
        self._llm = llm
        self._lock = threading.Lock()
        """Held by the one call that uses the llama.cpp context."""
        self._closing = False
        """Set by `close`: calls under way end early, new ones raise EngineClosedError."""
        self._tokenizing = 0
        """Calls reading the vocabulary without the lock (`tokenize_chat`)."""
        self._tokenizing_changed = threading.Condition()
        self._vocab = llm._model.vocab  # for llama_vocab_is_eog
        n_layers = int(llama_cpp.llama_model_n_layer(llm.model))
        supported = gpu_offload_supported()
        # llama.cpp counts the output layer as one more layer and offloads it
        # first (-1: all of them); the status shows its count.
        requested = n_layers + 1 if settings.n_gpu_layers < 0 else settings.n_gpu_layers
        gpu_layers = min(requested, n_layers + 1) if supported else 0
        report = compute_devices()
        self.info = ModelInfo(
            path=path,
            # The file name says more than general.name (it carries the quantization).
            name=path.stem,
            n_ctx=int(llm.n_ctx()),
            n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(llm.model)),
            n_layers=n_layers,
            gpu_layers=gpu_layers,
            gpu_supported=supported,
            gpu_devices=tuple(device_label(d) for d in report.offload_devices)
            if report is not None and gpu_layers
            else (),
            gpu_missing=report.missing_gpu if report is not None else None,
        )
        self.chat_prompt = ChatPrompt(llm, path, settings.plain_template)
        # How the model thinks, if it does: from its template and vocabulary,
        # never from its name (chat.engine.reasoning; docs/reasoning.md).
        self.info = replace(
            self.info,
            reasoning=recognise(
                self.chat_prompt.source,
                self.chat_prompt.formatters[True],
                special_token_test(llm.tokenize),
            ),
        )
        # How it calls tools, if its template shows it how (chat.engine.tool_calls).
        self.info = replace(
            self.info,
            tool_calls=find_syntax(self.chat_prompt.source, special_token_test(llm.tokenize)),
        )
        self.grammar: str | None = None
        """A GBNF grammar the replies are sampled under (None: none). The tests
        make the demo model's own tokens take a shape with it (a thinking
        block); constrained output will use it too."""
        self.answer_grammar: str | None = None
        """The grammar the answer is sampled under after a thinking budget
        closed the block (`grammar` starts over at a new call, so it cannot)."""
        self.plain_template_reason = self.chat_prompt.plain_template_reason
        """Why the model's own chat template is not used (plain ChatML is,
        as the user asked with `model.plain_template`), or None."""
        self._n_vocab = self.chat_prompt.n_vocab
        self._pieces: dict[int, str] = {}
        self._logits_view: tuple[int | None, Logits] | None = None
        """llama.cpp's logits buffer as an array, and the address it views."""
        self._batches = PromptBatches()
        self._prefilling = False
        self._reply_waiting = False
        """A reply waits for the lock: a prefill stops at its next batch."""
        self._save_waiting = False
        """`save_state` waits for the lock: a rebatch or a prefill (work done
        ahead of time) stops at its next batch."""
        # llama-cpp-python 0.3.36 samples a fully cached prompt from the logits of
        # its last decode (`_requires_eval` says whether they are live); versions
        # without that attribute evaluate the last prompt token again, so there
        # the whole batch is (see _prompt_span) and a prefill would save nothing.
        self._samples_cached_prompts = hasattr(llm, "_requires_eval")
        self._decode_threads: DecodeThreads | None = None
        """Chooses the decode threads between tokens where the counts give a
        busy machine's count (`use_threads`); None: a fixed count."""
        # Now, while the file is the one loaded (it could be replaced later).
        self._state_identity = identity_of(llm, self.info)

    def _cached_piece(self, token_id: int) -> str:
        """`_piece`, remembered: the token view names the same alternatives often."""
        text = self._pieces.get(token_id)
        if text is None:
            text = self._pieces[token_id] = self._piece(token_id)
        return text

    def _step_logits(self) -> Logits:
        """The logits the last token was sampled from: a view of llama.cpp's
        buffer, valid until the next token is evaluated."""
        pointer = llama_cpp.llama_get_logits_ith(self._llm.ctx, -1)
        address = ctypes.cast(pointer, ctypes.c_void_p).value
        # Making the array costs more than the rest of a step's recording on
        # the decode thread; the buffer stays where it is from token to token.
        if self._logits_view is None or self._logits_view[0] != address:
            view = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
            self._logits_view = (address, view)
        return self._logits_view[1]

    def _piece(self, token_id: int) -> str:
        """One token's own text, for showing tokens one by one (a token that is
        part of a multi-byte character shows as U+FFFD)."""
        return sanitize(bytes(self._llm.detokenize([token_id])).decode("utf-8", "replace"))

    def set_thinking(self, enabled: bool) -> None:
        reasoning = self.info.reasoning
        if reasoning is None or reasoning.enabled == (enabled or reasoning.switch is None):
            return
        reasoning = with_thinking(reasoning, self.chat_prompt.formatters[True], enabled)
        # Replaced whole: prompts are rendered on other threads meanwhile.
        self.chat_prompt.options = reasoning.options
        self.info = replace(self.info, reasoning=reasoning)

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        # Tokenizing reads only the vocabulary, never the context, so it does
        # not take the lock: the context meter can count while a reply streams.
        # The vocabulary is freed with the model: `close` waits for it instead.
        with self._reading_vocabulary():
            return self.chat_prompt.tokens(messages, add_generation_prompt, tools=tools)

    def count_text_tokens(self, text: str) -> int:
        """Tokens of `text` as plain text (a tool's result, to cut it to a limit)."""
        with self._reading_vocabulary():
            return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    @contextlib.contextmanager
    def _reading_vocabulary(self) -> Iterator[None]:
        with self._tokenizing_changed:
            self._refuse_if_closing()
            self._tokenizing += 1
        try:
            yield
        finally:
            with self._tokenizing_changed:
                self._tokenizing -= 1
                self._tokenizing_changed.notify_all()

    @contextlib.contextmanager
    def _using_context(self) -> Iterator[None]:
        """Hold the lock, for a call that waits for any other to end."""
        with self._lock:
            self._refuse_if_closing()
            yield

    def _refuse_if_closing(self) -> None:
        if self._closing:
            raise EngineClosedError(_CLOSED)

    def tokenize_prompt(self, messages: ChatMessages) -> list[int]:
        """The prompt `stream_reply(messages, ...)` sends, tokenized as a reply
        tokenizes it: piece by piece, the pieces then remembered, so that the
        next reply whose prompt extends this one tokenizes only its new pieces.
        After this call the engine is as after a turn that sent `messages`, as
        far as tokenizing goes (a benchmark times a turn that way).

        Unlike `tokenize_chat`, this waits for a reply or prefill in progress."""
        with self._using_context():
            return self.chat_prompt.tokens(messages, True, self.chat_prompt.pieces)

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
        continue_last: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> Iterator[EngineEvent]:
        # The wait for the first token starts here: finishing a prefill, rendering
        # and tokenizing the whole conversation are part of it.
        started = time.perf_counter()
        self._acquire_for_reply()
        try:
            if self._decode_threads is not None:
                self._decode_threads.look()
            # Only the holder of the lock uses the piece tokenizer.
            prompt = self.chat_prompt.tokens(
                messages,
                not continue_last,
                self.chat_prompt.pieces,
                open_last=continue_last,
                tools=tools,
            )
            n_ctx = self.info.n_ctx
            if len(prompt) >= n_ctx:
                raise PromptTooLongError(
                    f"The prompt is {len(prompt):,} tokens but the model's context window holds "
                    f"{n_ctx:,}. Shorten the message or start a new conversation."
                )
            with (
                StepRecorder(sampling, self._cached_piece)
                if record_probs
                else contextlib.nullcontext()
            ) as recorder:
                yield from self._generate(
                    prompt, sampling, cancel, recorder, started, sampling.repeatable, tools
                )
        finally:
            self._lock.release()

    def _acquire_for_reply(self) -> None:
        """Take the lock. A prefill in progress is waited for: a message's is
        one batch, usually the very prompt this reply needs; a conversation's
        stops after its current batch (what it evaluated is kept), and the reply
        evaluates the rest itself, with progress, stoppable. A reply is not
        waited for."""
        # `prefill` clears the flag only after releasing the lock, so a prefill
        # that ends meanwhile is still seen here.
        if not self._lock.acquire(blocking=False):
            if not self._prefilling:
                raise EngineBusyError(
                    "A reply is already being generated; wait for it or press Escape."
                )
            self._reply_waiting = True
            try:
                if not self._lock.acquire(timeout=PREFILL_WAIT_S):
                    raise EngineBusyError("The model is busy; try again in a moment.")
            finally:
                self._reply_waiting = False
        if self._closing:
            self._lock.release()
            raise EngineClosedError(_CLOSED)

    def prefill(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        exact: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> bool:
        """Evaluate the prompt for `messages` now, before it is sent (while the
        user pauses over their message): if exactly this prompt is sent next,
        its first token is sampled at once, with the same logits as if nothing
        had been evaluated ahead. Anything else sent evaluates as usual.

        Without `add_generation_prompt`, `messages` is a conversation to be
        continued (just opened): only its whole batches are evaluated, the ones
        the next reply would evaluate anyway, in the same batches.

        With `exact`, for a repeatable reply (`SamplingSettings.repeatable`):
        what the last reply decoded one token at a time is evaluated again too
        (see `_prompt_span`). `tools`: the tools the reply will be offered.

        Returns False when the prompt was not made ready: the engine is busy,
        the prompt does not fit, it needs more than one batch (too long to
        guess at), or a conversation has no whole batch left to evaluate."""
        with self._ahead_of_time() as free:
            if not free or self._closing:
                return False
            prompt = self.chat_prompt.tokens(
                messages, add_generation_prompt, self.chat_prompt.pieces, tools=tools
            )
            if len(prompt) >= self.info.n_ctx:
                return False
            start, end = self._prompt_span(prompt, exact)
            n_batch = self.batch_size
            if not add_generation_prompt:
                end = start + (len(prompt) - start) // n_batch * n_batch
            elif end - start > n_batch:
                return False
            # `close` and a reply sent meanwhile wait for one batch at most. (A
            # message's prefill is one batch: the reply waits for it.)
            if start < end and not self._evaluate_batches(
                prompt,
                start,
                end,
                lambda: (
                    self._closing
                    or self._save_waiting
                    or (self._reply_waiting and not add_generation_prompt)
                ),
            ):
                return False
            return start < end or add_generation_prompt

    @contextlib.contextmanager
    def _ahead_of_time(self) -> Iterator[bool]:
        """The lock for work done before it is needed (`prefill`,
        `rebatch_reply`): whether it was free; never waited for. A reply sent
        meanwhile waits for it (`_acquire_for_reply`)."""
        if not self._samples_cached_prompts or not self._lock.acquire(blocking=False):
            yield False
            return
        self._prefilling = True
        if self._decode_threads is not None:
            self._decode_threads.look()
        try:
            yield True
        finally:
            # The flag is cleared only after the lock is released: see
            # `_acquire_for_reply`.
            self._lock.release()
            self._prefilling = False

    def _evaluate_batches(
        self,
        tokens: Sequence[int],
        start: int,
        end: int,
        stop: Callable[[], bool],
        batches: Iterable[Span] | None = None,
    ) -> bool:
        """Evaluate `tokens[start:end]` into the KV cache one batch at a time
        (`batches`, else `_chunks`), ahead of time; stops between batches when
        `stop()` says so (what was evaluated stays). Returns whether all of it
        was."""
        if self._decode_threads is not None:
            self._decode_threads.before_batches()  # after `look` (`_ahead_of_time`)
        self._start_batch(start, end)
        for first, last in batches if batches is not None else self._chunks(start, end):
            if stop():
                self._batches.end_early(start, first)
                llama_cpp.llama_synchronize(self._llm.ctx)  # see below
                return False
            self._llm.eval(tokens[first:last])
        # Done here, not at the next sampling: llama.cpp's timings (the next
        # reply's "evaluated" count) are settled at a sync.
        llama_cpp.llama_synchronize(self._llm.ctx)
        return True

    def _generate(
        self,
        prompt: list[int],
        sampling: SamplingSettings,
        cancel: threading.Event,
        recorder: StepRecorder | None,
        started: float,
        exact: bool,
        tools: Sequence[ToolDefinition] = (),
    ) -> Iterator[EngineEvent]:
        llm = self._llm
        syntax = self.info.tool_calls
        parser = ToolCallParser(syntax) if tools and syntax is not None else None
        call_reply: ReplyText | None = None
        """The call's own text, once a call began (sampled under its grammar)."""
        sampled: list[int] = []
        seed = sampling.seed if sampling.seed is not None else random.randrange(2**32)
        llm.set_seed(seed)
        reply = ReplyText(stop=sampling.stop)
        # llama.cpp adds batches to its counts at a sync: one left pending (the
        # thread calibration's last) would be counted as this reply's.
        llama_cpp.llama_synchronize(llm.ctx)
        llama_cpp.llama_perf_context_reset(llm.ctx)
        threads = self._decode_threads
        if threads is not None:
            # Before the prompt: its batches use the count the reply starts with.
            threads.before_batches()
            threads.reply_started()
        start, end = self._prompt_span(prompt, exact)
        if start < end:
            self._start_batch(start, end)
            # Evaluated here rather than in generate(), in the same batches, so
            # that progress is reported and a cancel heard between batches;
            # generate() then samples from the last batch's logits at once.
            # (Older llama-cpp-python would evaluate the last token again.)
            if self._samples_cached_prompts:
                read = yield from self._evaluate_prompt(prompt, start, end, cancel)
                if not read:
                    yield self._stopped_reading(prompt, seed, started)
                    return
        first_token_at: float | None = None
        evaluated = 0
        generated = 0
        finish: FinishReason = "done"
        # A reasoning model's markers may be special tokens (Qwen3's `<think>`),
        # and so may a call's (`<tool_call>`): their text is kept so that the
        # thinking can be told from the answer, and a call found.
        special = self.info.reasoning is not None or parser is not None
        budget = self._thinking_budget(sampling)
        grammar_text = self.grammar
        sequence = prompt
        # Sampling starts again from the KV cache (only what changed is
        # evaluated) when a call begins, its arguments under the grammar of the
        # tools' schemas, and when the thinking budget is spent.
        while True:
            closing: list[int] = []
            call_began = False
            tokens = self._sample(sequence, sampling, grammar_text)
            try:
                for token in tokens:
                    if first_token_at is None:
                        first_token_at = time.perf_counter()
                        evaluated = _prompt_tokens_evaluated(llm.ctx)
                    if threads is not None:
                        threads.token_decoded()
                    if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                        break
                    generated += 1
                    sampled.append(int(token))
                    piece = bytes(llm.detokenize([token], special=special))
                    text = ""
                    if call_reply is not None and parser is not None:
                        call_text = call_reply.feed(piece)
                        parser.feed(call_text)
                        yield TokenEvent(call_text, token, tool_call=True)
                    else:
                        text = reply.feed(piece)
                        if recorder is not None:
                            recorder.record(self._step_logits(), token, self._cached_piece(token))
                        if parser is None:
                            if reply.stopped:
                                if text:
                                    yield TokenEvent(text, token)
                                break
                            yield TokenEvent(text, token)
                        else:
                            shown, _ = parser.feed(text)
                            yield TokenEvent(shown, token)
                            if parser.in_call:
                                call_began = True
                                break
                            if reply.stopped:
                                break
                    if cancel.is_set() or self._closing:
                        finish = "stopped"
                        break
                    if generated >= sampling.max_tokens:
                        finish = "max_tokens"
                        break
                    # The next token needs this one evaluated; the window has no room.
                    if len(prompt) + len(sampled) >= self.info.n_ctx:
                        finish = "context_full"
                        break
                    if budget is not None and call_reply is None:
                        closing = budget.feed(text)
                        room = min(
                            sampling.max_tokens - generated,
                            self.info.n_ctx - len(prompt) - len(sampled),
                        )
                        if closing and len(closing) < room:
                            break
                        closing = []
            finally:
                tokens.close()
            if call_began and parser is not None:
                sampled = self._to_opener_end(sampled, parser.text_to_opener_end)
                parser.drop_overshoot()
                opener = parser.opener
                assert opener is not None and syntax is not None
                yield TokenEvent(opener.text, -1, tool_call=True)
                call_reply = ReplyText()
                sequence = [*prompt, *sampled]
                grammar_text = call_grammar(syntax, opener, tools)
                budget = None
                continue
            if not closing:
                break
            # The budget is spent: the block is closed here, as if the model had
            # written it, and the answer is sampled after it from the KV cache.
            for token in closing:
                generated += 1
                sampled.append(token)
                text = reply.feed(bytes(llm.detokenize([token], special=True)))
                if recorder is not None:
                    recorder.add(forced_choice(token, self._cached_piece(token)))
                if parser is not None:
                    text, _ = parser.feed(text)
                yield TokenEvent(text, token)
            sequence = [*prompt, *sampled]
            grammar_text = self.answer_grammar
            budget = None
        calls: tuple[ToolCall, ...] = ()
        call_error: str | None = None
        if call_reply is not None and parser is not None:
            parser.feed(call_reply.flush())
            try:
                calls = parser.calls()
            except ToolCallTextError as error:
                call_error = str(error)
        else:
            tail = reply.flush()
            if parser is not None:
                shown, _ = parser.feed(tail)
                tail = shown + parser.flush()
            if tail:
                yield TokenEvent(tail, -1)
        ended = time.perf_counter()
        first = first_token_at or ended
        decode_s = ended - first
        stats = ReplyStats(
            prompt_tokens=len(prompt),
            prompt_evaluated=evaluated,
            generated_tokens=generated,
            ttft_s=first - started,
            decode_tps=(generated - 1) / decode_s if generated > 1 and decode_s > 0 else 0.0,
            finish_reason=finish,
            seed=seed,
            total_s=ended - started,
        )
        text = reply.text if parser is None else parser.before
        token_ids = self._spelling_tokens(sampled, text)
        choices = tuple(recorder.choices()) if recorder is not None else ()
        yield Finished(
            text, stats, choices, token_ids, tool_calls=calls, tool_call_error=call_error
        )

    def _to_opener_end(self, sampled: list[int], text: str) -> list[int]:
        """The reply's tokens cut where a call's opener ends: the sampled ones
        that spell a start of `text` (as bytes), then the rest of `text`
        tokenized (the last token may have run past the opener). Only what
        differs from the KV cache is evaluated again."""
        target = text.encode("utf-8")
        kept: list[int] = []
        length = 0
        for token in sampled:
            spelled = self.chat_prompt.spell([token])
            if not target.startswith(spelled, length):
                break
            kept.append(token)
            length += len(spelled)
        rest = target[length:]
        return kept + (self.chat_prompt.tokenize_text(rest, False) if rest else [])

    def _sample(
        self, sequence: list[int], sampling: SamplingSettings, grammar_text: str | None
    ) -> Generator[int, None, None]:
        """`Llama.generate` over `sequence`: the longest prefix the KV cache
        holds is kept, the rest evaluated, then tokens are sampled."""
        grammar = (
            llama_cpp.LlamaGrammar.from_string(grammar_text, verbose=False)
            if grammar_text
            else None
        )
        tokens: Generator[int, None, None] = self._llm.generate(
            sequence,
            temp=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            min_p=sampling.min_p,
            typical_p=sampling.typical_p,
            repeat_penalty=sampling.repeat_penalty,
            presence_penalty=sampling.presence_penalty,
            frequency_penalty=sampling.frequency_penalty,
            mirostat_mode=sampling.mirostat_mode,
            mirostat_tau=sampling.mirostat_tau,
            mirostat_eta=sampling.mirostat_eta,
            reset=True,  # keeps the longest common prefix of the KV cache
            grammar=grammar,
        )
        return tokens

    def _thinking_budget(self, sampling: SamplingSettings) -> ThinkingBudget | None:
        """The budget a reply's thinking runs under, when it has one and the
        model thinks (with thinking on)."""
        reasoning = self.info.reasoning
        if not sampling.thinking_budget or reasoning is None or not reasoning.enabled:
            return None
        return ThinkingBudget(
            reasoning,
            sampling.thinking_budget,
            lambda text: self.chat_prompt.tokenize_text(text, False),
        )

    def _evaluate_prompt(
        self, prompt: list[int], start: int, end: int, cancel: threading.Event
    ) -> Generator[PromptProgress, None, bool]:
        """Evaluate `prompt[start:end]` one batch at a time (`_chunks`), with
        progress after each. Stops between batches when `cancel` is set or the engine closes:
        the batches evaluated stay in the KV cache, and the same prompt sent
        again resumes after them. Returns whether all of it was evaluated."""
        total = end - start
        began = time.perf_counter()
        yield PromptProgress(0, total, 0.0)
        for first, last in self._chunks(start, end):
            if cancel.is_set() or self._closing:
                self._batches.end_early(start, first)
                return False
            self._llm.eval(prompt[first:last])
            yield PromptProgress(last - start, total, time.perf_counter() - began)
        return True

    def _stopped_reading(self, prompt: list[int], seed: int, started: float) -> Finished:
        """The end of a reply stopped while its prompt was evaluated: no text."""
        llama_cpp.llama_synchronize(self._llm.ctx)  # settles llama.cpp's timings
        ended = time.perf_counter()
        stats = ReplyStats(
            prompt_tokens=len(prompt),
            prompt_evaluated=_prompt_tokens_evaluated(self._llm.ctx),
            generated_tokens=0,
            ttft_s=ended - started,
            decode_tps=0.0,
            finish_reason="stopped",
            seed=seed,
            total_s=ended - started,
        )
        return Finished("", stats, (), ())

    def _spelling_tokens(self, sampled: list[int], text: str) -> tuple[int, ...] | None:
        """The first of the `sampled` tokens, as many as spell `text` exactly:
        all of them, or fewer when a stop sequence cut the reply at a token's
        start. None when none do: the text was sanitised, or cut mid-token (a
        stop sequence, a character left incomplete)."""
        target = text.encode("utf-8")
        count, length = 0, 0
        for token in sampled:
            if length >= len(target):
                break
            length += len(self.chat_prompt.spell([token]))
            count += 1
        ids = tuple(sampled[:count])
        return ids if self.chat_prompt.spell(ids) == target else None

    def _prompt_span(self, prompt: list[int], exact: bool = False) -> tuple[int, int]:
        """The span of `prompt` to evaluate, so that the same prompt gives the
        same logits whatever the KV cache held before (`PromptBatches.span`)."""
        llm = self._llm
        n_cached = int(llm.n_tokens)
        # As generate() computes it: the tokens of `prompt` the cache holds.
        resume = llama_cpp.Llama.longest_token_prefix(llm.input_ids[:n_cached], prompt)
        # The logits are a live decode's (see _samples_cached_prompts).
        live = self._samples_cached_prompts and not llm._requires_eval
        return self._batches.span(len(prompt), resume, n_cached, exact, live)

    def _start_batch(self, start: int, end: int) -> None:
        """Cut the KV cache at `start`, where the prompt batch [start, end) goes."""
        self._llm.n_tokens = start  # generate() and eval() keep only this much
        self._batches.start(start, end)

    @property
    def batch_size(self) -> int:
        """Tokens evaluated in one call: `n_batch`, and no more than llama.cpp's
        physical batch (`n_ubatch`), which it would split them into. A prompt
        evaluated ahead of time is evaluated in whole batches of this size."""
        return max(2, min(int(self._llm.n_batch), int(self._llm.context_params.n_ubatch)))

    def _chunks(self, start: int, end: int) -> Iterator[Span]:
        """[start, end) cut into batches of `batch_size`."""
        return chunks(start, end, self.batch_size)

    def _batch_built_end(self) -> int:
        return self._batches.built_end(int(self._llm.n_tokens))

    def rebatch_reply(self) -> bool:
        """Evaluate again, in batches, what the KV cache holds that a reply
        evaluated one token at a time, so that a repeatable reply sent next
        evaluates only its new message (see `_prompt_span`). Run in the
        background once a reply ends (with a fixed seed or temperature 0); a
        reply sent meanwhile waits for the current batch at most, as for a
        prefill. Returns False when there was nothing to do or the engine was
        busy."""
        with self._ahead_of_time() as free:
            if not free or self._closing:
                return False
            end = int(self._llm.n_tokens)
            built = self._batch_built_end()
            if built >= end or end < 2:
                return False
            start = max(0, min(built, end - 2))  # never a batch of one token
            return self._evaluate_batches(
                self._llm.input_ids[:end].tolist(),
                start,
                end,
                lambda: self._closing or self._reply_waiting or self._save_waiting,
                timed_chunks(start, end, REBATCH_BATCH_S, min(REBATCH_MOST, self.batch_size)),
            )

    @property
    def llama(self) -> Any:
        """The underlying `llama_cpp.Llama`, for benchmarks and diagnostics. One
        call at a time: use it only while the engine generates nothing, and
        know that the engine does not see what is done with it (a state loaded
        into it, for one, is not a batch the engine evaluated)."""
        return self._llm

    @property
    def key_cache_type(self) -> str:
        """The type of the KV cache's keys llama.cpp was given, as the setting
        `model.cache_type_k` names it ("q8_0", "f16"): what "auto" became."""
        given = self._llm.context_params.type_k
        names = (name for name, ggml in _KEY_CACHE_GGML_TYPES.items() if ggml == given)
        return next(names, f"ggml type {given}")

    @property
    def cached_tokens(self) -> int:
        """Tokens the KV cache holds now (the last sampled token is never evaluated)."""
        return int(self._llm.n_tokens)

    def state_identity(self) -> StateIdentity:
        return self._state_identity

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        llm = self._llm
        return common_prefix(llm.input_ids[: int(llm.n_tokens)], tokens)

    def save_state(self, timeout: float = 1.0) -> KvState | None:
        """Copy the KV cache's sequence out (llama.cpp's `llama_state_seq_*`:
        the cache only, not `Llama.save_state()`, which also copies every
        logit row) with the tokens llama-cpp-python records it holds."""
        self._save_waiting = True  # a rebatch or prefill stops at its next batch
        try:
            acquired = self._lock.acquire(timeout=max(0.0, timeout))
        finally:
            self._save_waiting = False
        if not acquired:
            return None
        try:
            self._refuse_if_closing()
            llm = self._llm
            n_tokens = int(llm.n_tokens)
            if n_tokens == 0:
                return None
            data = copy_sequence(llm, n_tokens)
            if data is None:
                return None
            tokens = tuple(llm.input_ids[:n_tokens].tolist())
            return KvState(tokens, data, self._batches.held(n_tokens))
        finally:
            self._lock.release()

    def restore_state(self, state: KvState) -> bool:
        n_tokens = len(state.tokens)
        with self._using_context():
            llm = self._llm
            if not 0 < n_tokens < self.info.n_ctx or max(state.tokens) >= self._n_vocab:
                return False
            if not load_sequence(llm, state.data):  # refused: llama.cpp emptied the sequence
                llm.reset()
                self._batches.clear()
                return False
            # What generate() compares the next prompt with; the logits of the
            # last token were not saved, so it must evaluate at least one.
            llm.input_ids[:n_tokens] = state.tokens
            llm.n_tokens = n_tokens
            llm._requires_eval = True
            self._batches.restore(state.batches, n_tokens)
            return True

    def reset(self) -> None:
        with self._using_context():
            self._llm.reset()
            self._batches.clear()

    def choose_threads(self, settings: ModelSettings, spare_core: bool) -> ThreadCounts:
        """Use the thread counts the settings give, else the fastest measured
        on this machine for this model (measured now if never before; see
        chat.engine.threads). `spare_core`: leave a core to a UI."""
        identity = self._state_identity
        counts = choose_threads(
            settings.n_threads,
            settings.n_threads_batch,
            self.measure_threads,
            RememberedRates(paths.cache_dir() / "threads.json"),
            f"{identity.model_hash} gpu {identity.gpu_layers}",
            spare_core,
            # Any other program on the cores a team of every core would use.
            lambda: bool(others_in_the_way(usable_cores())),
        )
        self.use_threads(counts)
        return counts

    def use_threads(self, counts: ThreadCounts) -> None:
        """Decode with `counts.decode` threads (`counts.busy` while the machine
        is busy: chat.engine.decode_threads) and evaluate prompt batches with
        `counts.batch` from the next call on."""
        with self._using_context():
            llama_cpp.llama_set_n_threads(self._llm.ctx, counts.decode, counts.batch)
            self._decode_threads = (
                None
                if counts.busy is None or counts.busy == counts.decode
                else DecodeThreads(
                    counts.decode,
                    counts.busy,
                    self._set_decode_threads,
                    others=functools.partial(others_in_the_way, counts.decode),
                )
            )
        self.info = replace(self.info, threads=counts)

    def _set_decode_threads(self, decode: int) -> None:
        """The next token decodes with `decode` threads, and prompt batches
        with the count that goes with it (called by the reply's loop)."""
        counts = self.info.threads
        batch = counts.batch_while(decode) if counts is not None else decode
        llama_cpp.llama_set_n_threads(self._llm.ctx, decode, batch)

    @property
    def thread_choice(self) -> DecodeThreads | None:
        """What chooses the decode threads as tokens come, where something does."""
        return self._decode_threads

    @property
    def decode_threads(self) -> int | None:
        """The threads the next token decodes with, where kvchat chose them."""
        if self._decode_threads is not None:
            return self._decode_threads.current
        return self.info.threads.decode if self.info.threads is not None else None

    def measure_threads(self, counts: Sequence[int]) -> Measured:
        """Decode and batch rates at each thread count (see chat.engine.threads),
        on a few tokens of filler; the KV cache is emptied after."""
        filler = self.chat_prompt.tokenize_text(CALIBRATION_FILLER, False)
        llm = self._llm

        def set_threads(n: int) -> None:
            llama_cpp.llama_set_n_threads(llm.ctx, n, n)

        with self._using_context():
            try:
                return measure(counts, filler, set_threads, llm.reset, llm.eval)
            finally:
                llm.reset()
                self._batches.clear()
                decode = self.decode_threads
                if decode is not None:
                    self._set_decode_threads(decode)

    def close(self) -> None:
        """Free the model once no call uses it: a reply under way ends after its
        current token (or prompt batch), a prefill after its current batch, a
        tokenizing call when done; later calls are refused (EngineClosedError).
        A batch being evaluated cannot be interrupted: this may wait for it (run
        it in a thread to bound the wait; the model is freed when the call ends)."""
        self._closing = True
        with self._lock, self._tokenizing_changed:
            self._tokenizing_changed.wait_for(lambda: self._tokenizing == 0)
            self._logits_view = None
            self._llm.close()
