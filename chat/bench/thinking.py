"""Reasoning models (issue 29): what the turn after a thinking reply costs, a
prefilled draft's first answer token, and what the UI pays per thinking token.

No reasoning model can be downloaded for the benchmark: the benchmark's model
plays one, with Qwen3's chat template written into a copy of its GGUF (the
`gguf` package; the template is the one the tests use,
chat/bench/qwen3.jinja) and a grammar that makes its own tokens
think, then answer. Qwen3's template drops earlier thinking from the next
prompt, so the next turn evaluates the previous answer again: the least
possible is everything after the common prefix of the next prompt and what
the KV cache holds (the first prompt and the reply as sampled). kvchat's
figure stands beside llama-server's own (`timings.prompt_n`, `cache_n`) on
the same conversation, and beside kvchat with earlier thinking kept
(`sampling.keep_thinking`). Without the `gguf` package or the template the
rows are left out (said on stderr); without llama-server, its row."""

from __future__ import annotations

import asyncio
import contextlib
import io
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from chat.bench.rows import Options, Row
from chat.bench.workload import finished, quiet_load, until
from chat.engine.kv_state import common_prefix
from chat.engine.llama import LlamaEngine
from chat.engine.protocol import ChatMessages, Engine, EngineEvent, Finished, TokenEvent
from chat.engine.reasoning.markers import THINK, Reasoning
from chat.engine.reasoning.splitter import ThinkingSplitter
from chat.models.files import ModelCandidate
from chat.settings.schema import ModelSettings, SamplingSettings, Settings

TEMPLATE = Path(__file__).parent / "qwen3.jinja"
"""Qwen3's chat template, shipped with the benchmark (the tests read it from here too)."""
GRAMMAR = (
    'root ::= "<think>\\n" thought "\\n</think>\\n\\n" answer\n'
    "thought ::= [a-z] [a-z ,.]{8,120}\n"
    "answer ::= [A-Z] [a-z ,.]{4,80}\n"
)
"""The demo model's own tokens made to think, then answer (as the tests' grammar)."""
QUESTION = [{"role": "user", "content": "Why is the sky blue? Think first."}]
NEXT = {"role": "user", "content": "And why is the sunset red?"}
SAMPLING = SamplingSettings(temperature=0.0, max_tokens=160)
UI_COST_TARGET = 1.5
"""A thinking token may cost the UI at most this much more than an answer's
(it streams into a folded line, the answer into Markdown)."""


# -- the rows, from what was measured (tests/bench/test_thinking_rows.py) --------------


def reuse_row(name: str, evaluated: int | None, least: int, sent: int, note: str = "") -> Row:
    """Tokens a turn evaluated against the least it could: met when no more."""
    if evaluated is None:
        return Row(name, None, "tokens", f"<= {least:,} (least possible)")
    extra = f"; {note}" if note else ""
    return Row(
        name,
        evaluated,
        "tokens",
        f"<= {least:,} (least possible)",
        evaluated <= least,
        note=f"of {sent:,} sent{extra}",
    )


def prefill_row(
    first_answer_s: float, cold_first_answer_s: float, ttft_s: float, rounds: int = 1
) -> Row:
    """The first answer token of a reply whose draft was prefilled, beside the
    same reply without the prefill (medians of `rounds` taking turns)."""
    medians = f"; medians of {rounds}, taking turns" if rounds > 1 else ""
    return Row(
        "thinking: first answer token after a paused draft (prefill)",
        first_answer_s * 1000,
        "ms",
        "< without prefill",
        first_answer_s < cold_first_answer_s,
        note=(
            f"without prefill {cold_first_answer_s * 1000:.0f} ms; first (thinking) "
            f"token {ttft_s * 1000:.0f} ms after the prefill{medians}"
        ),
    )


def ui_cost_row(thinking_s: float, plain_s: float) -> Row:
    """The UI's CPU time per streamed thinking token against a plain reply's."""
    ratio = thinking_s / plain_s if plain_s > 0 else None
    return Row(
        "thinking: UI cost per streamed thinking token / plain token",
        ratio,
        "x",
        f"<= {UI_COST_TARGET}x",
        ratio <= UI_COST_TARGET if ratio is not None else None,
        note=(
            f"{thinking_s * 1e6:.0f} µs per thinking token, {plain_s * 1e6:.0f} µs per "
            "plain token (CPU time of the app, tokens played back)"
        ),
    )


# -- measuring ---------------------------------------------------------------------------


def thinking_rows(options: Options) -> list[Row]:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model = _reasoning_copy(options.model, folder)
        if model is None:
            return []
        engine = quiet_load(model, ModelSettings(n_ctx=2048), folder / "llama.log")
        try:
            engine.grammar = GRAMMAR
            turn = _turn_after_thinking(engine)
            rows = [
                reuse_row(
                    "thinking: turn after a thinking reply, evaluated (kvchat)",
                    turn.evaluated,
                    turn.least,
                    turn.sent,
                    "the previous answer again, the new message, the template's tokens",
                ),
                reuse_row(
                    "thinking: the same, earlier thinking kept (keep_thinking)",
                    turn.kept_evaluated,
                    turn.kept_least,
                    turn.kept_sent,
                    "the reply sent back as sampled",
                ),
            ]
            rows += _server_row(model, folder, turn)
            rows.append(_prefill(engine, 1 if options.quick else 5))
            rows.append(asyncio.run(_ui_cost(engine, 60 if options.quick else 400)))
        finally:
            engine.close()
    return rows


def _reasoning_copy(model: Path, folder: Path) -> Path | None:
    """A copy of `model` with Qwen3's chat template; None (said why) when it
    cannot be made here."""
    from chat.models.template_copy import with_chat_template

    if not TEMPLATE.is_file():
        print(f"thinking rows left out: {TEMPLATE} is missing", file=sys.stderr)
        return None
    template = TEMPLATE.read_text(encoding="utf-8")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the gguf package's progress bar
            return with_chat_template(model, folder / "qwen3-think.gguf", template)
    except ImportError:
        print("thinking rows left out: the gguf package is not installed", file=sys.stderr)
        return None


@dataclass
class TurnAfterThinking:
    history: list[dict[str, Any]]
    """The question, the thinking reply and the next question."""
    evaluated: int
    least: int
    sent: int
    kept_evaluated: int
    kept_least: int
    kept_sent: int


def _reply(engine: Engine, messages: ChatMessages, sampling: SamplingSettings) -> Finished:
    return finished(engine.stream_reply(messages, sampling, threading.Event()))


def _first_reply(engine: LlamaEngine) -> Finished:
    """The thinking reply, and what the app does after a repeatable one while
    the user reads (`rebatch_reply`: the KV cache then holds the reply as a
    conversation evaluated from scratch would)."""
    reply = _reply(engine, QUESTION, SAMPLING)
    engine.rebatch_reply()
    return reply


def _split(text: str) -> tuple[str, str]:
    splitter = ThinkingSplitter(THINK)
    splitter.feed(text)
    splitter.flush()
    return splitter.thinking, splitter.answer


def _turn_after_thinking(engine: LlamaEngine) -> TurnAfterThinking:
    """A thinking reply, then the next question: with the thinking dropped
    (as the template does), and kept (the reply as sampled)."""
    short = replace(SAMPLING, max_tokens=4)
    figures = []
    history: list[dict[str, Any]] = []
    for keep in (False, True):
        engine.reset()
        first = engine.tokenize_chat(QUESTION)
        reply = _first_reply(engine)
        sampled = list(reply.token_ids or ())
        thinking, answer = _split(reply.text)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": answer,
            "reasoning_content": thinking,
            "token_ids": sampled,
        }
        if keep:
            message["sampled_whole"] = True
        history = [*QUESTION, message, NEXT]
        prompt = engine.tokenize_chat(history)
        least = len(prompt) - common_prefix([*first, *sampled], prompt)
        second = _reply(engine, history, short)
        figures.append((second.stats.prompt_evaluated, least, len(prompt)))
        history[1] = {k: v for k, v in message.items() if k != "sampled_whole"}
    (evaluated, least, sent), (kept_evaluated, kept_least, kept_sent) = figures
    return TurnAfterThinking(history, evaluated, least, sent, kept_evaluated, kept_least, kept_sent)


def _server_row(model: Path, folder: Path, turn: TurnAfterThinking) -> list[Row]:
    """The same conversation on llama-server: what its own cache reused."""
    from chat.bench.remote import LlamaServer, server_binary

    binary = server_binary()
    if binary is None:
        print("thinking: llama-server row left out (no llama-server)", file=sys.stderr)
        return []
    with LlamaServer(binary, model, folder, extra=("--jinja",)) as url:
        from chat.engine.remote import ServerConfig, connect

        engine = connect(ServerConfig(url))
        try:
            engine.grammar = GRAMMAR  # type: ignore[attr-defined]
            question = turn.history[:1]
            first = engine.tokenize_chat(question)
            reply = _reply(engine, question, SAMPLING)
            thinking, answer = _split(reply.text)
            # As a chat client sends it back: the answer, its thinking apart.
            history = [
                *question,
                {"role": "assistant", "content": answer, "reasoning_content": thinking},
                NEXT,
            ]
            prompt = engine.tokenize_chat(history)
            # What the server's cache holds: the first prompt and the reply as
            # sampled (the first prompt alone, if the ids did not come back).
            held = [*first, *(reply.token_ids or ())]
            least = len(prompt) - common_prefix(held, prompt)
            second = _reply(engine, history, replace(SAMPLING, max_tokens=4))
        finally:
            engine.close()
    stats = second.stats
    return [
        reuse_row(
            "thinking: turn after a thinking reply, evaluated by llama-server",
            stats.prompt_evaluated,
            least,
            stats.prompt_tokens,
            f"cache_n {stats.prompt_reused:,}; kvchat's local engine: {turn.evaluated:,}",
        )
    ]


def _timed(engine: Engine, messages: ChatMessages) -> tuple[float, float]:
    """Seconds to the reply's first token and to its answer's first token."""
    started = time.perf_counter()
    first = answer = None
    splitter = ThinkingSplitter(THINK)
    cancel = threading.Event()
    for event in engine.stream_reply(messages, SAMPLING, cancel):
        if isinstance(event, TokenEvent):
            now = time.perf_counter()
            first = first or now
            if any(part.kind == "answer" and part.text for part in splitter.feed(event.text, 1)):
                answer = now
                cancel.set()
    end = time.perf_counter()
    return (first or end) - started, (answer or end) - started


def _prefill(engine: LlamaEngine, rounds: int) -> Row:
    """The next question typed after a thinking reply, a pause, then sent:
    its first answer token, against the same turn sent at once. What the
    prefill saves is the prompt's evaluation (100-200 ms here); the thinking
    before the answer (45 tokens, ~0.9 s) moves by as much from one reply to
    the next on this machine, so the two take turns and the medians count."""
    cold: list[float] = []
    warm: list[tuple[float, float]] = []
    for index in range(rounds):
        order = (False, True) if index % 2 == 0 else (True, False)
        for prefilled in order:
            engine.reset()
            reply = _first_reply(engine)
            thinking, answer = _split(reply.text)
            history = [
                *QUESTION,
                {"role": "assistant", "content": answer, "reasoning_content": thinking},
                NEXT,
            ]
            if prefilled:
                engine.prefill(history)
                warm.append(_timed(engine, history))
            else:
                cold.append(_timed(engine, history)[1])
    return prefill_row(
        statistics.median(answer_s for _, answer_s in warm),
        statistics.median(cold),
        statistics.median(ttft for ttft, _ in warm),
        rounds,
    )


class _Playback:
    """The engine, replying with `pieces` at once (no model time): what the app
    spends on them is all that is measured. `reasoning`: as the model's."""

    def __init__(self, engine: LlamaEngine, pieces: Sequence[str], reasoning: Reasoning | None):
        self._engine = engine
        self._pieces = list(pieces)
        self.info = replace(engine.info, reasoning=reasoning)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def set_thinking(self, enabled: bool) -> None:
        pass

    def prefill(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def stream_reply(self, *args: Any, **kwargs: Any) -> Iterator[EngineEvent]:
        text = ""
        for index, piece in enumerate(self._pieces):
            text += piece
            yield TokenEvent(piece, index)
        from chat.conversations.conversation import ReplyStats

        stats = ReplyStats(10, 10, len(self._pieces), 0.0, 0.0, "done")
        yield Finished(text, stats)

    def close(self) -> None:
        pass


async def _app_cpu_per_token(engine: Engine, tokens: int) -> float:
    """CPU seconds of this process per token while the app takes a played-back reply."""
    from chat.ui.app import ChatApp, Launch
    from chat.ui.widgets.prompt_box import PromptBox

    settings = Settings()
    launch = Launch(settings, ModelCandidate(engine.info.path, 0, "bench"))
    app = ChatApp(launch, engine_factory=lambda path, chosen: engine)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await until(lambda: screen.engine is not None)
        app.query_one(PromptBox).insert("Why?")
        started = time.process_time()
        await pilot.press("enter")
        await until(lambda: len(screen.conversation.messages) == 2 and not screen.generating)
        spent = time.process_time() - started
    return spent / tokens


async def _ui_cost(engine: LlamaEngine, tokens: int) -> Row:
    words = [f" word{i % 10}" for i in range(tokens)]
    thinking = ["<think>", "\n", *words, "\n</think>", "\n\n", "Done."]
    think_engine = cast(Engine, _Playback(engine, thinking, Reasoning(THINK, "template")))
    plain_engine = cast(Engine, _Playback(engine, [*words, "Done."], None))
    thinking_s = await _app_cpu_per_token(think_engine, len(thinking))
    plain_s = await _app_cpu_per_token(plain_engine, len(words) + 1)
    return ui_cost_row(thinking_s, plain_s)
