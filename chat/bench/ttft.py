"""Time to first token as a conversation grows.

Every turn sends the whole conversation again; llama.cpp keeps the longest
common prefix of its KV cache, so a long conversation should start its reply
about as fast as a short one. Measured per turn with the cache reused, with
`reset()` before the turn (what the cache saves), and with the message
prefilled as the app does when typing pauses. Turn N / turn 1 is shown for
kvchat next to a bare llama-cpp-python client given the same saved turns:
the target (docs/performance.md, "Targets") is kvchat's ratio <= 1.1x the
bare client's."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, bare_generate, finished, first_token_reply
from chat.engine.kv_state import KvState
from chat.engine.llama import LlamaEngine

TTFT_ROUNDS = 7


@dataclass
class Ttft:
    reused: list[float]
    """Seconds per turn with the KV cache reused (NaN for turns not reported)."""
    cold: list[float]
    """The same with `reset()` before the turn (NaN for turns not reported)."""
    prefilled: list[float]
    """The same with the message prefilled, as during a pause in typing."""
    prompt_sizes: list[int]
    last_to_first: float
    """Last turn / turn 1 with the cache reused: the median of per-round ratios."""
    raw_last_to_first: float
    """The same for a bare llama-cpp-python client given the prompt's tokens."""


def ttft_by_turn(
    engine: LlamaEngine, turns: int, reply_tokens: int, rounds: int = TTFT_ROUNDS
) -> Ttft:
    """TTFT per turn with the KV cache reused, again with `reset()` before
    each turn, and with the message prefilled as the app does when typing
    pauses (same conversation, stopped at the first token).

    The conversation is generated once; the KV cache before each reported turn
    is kept (the engine's saved state). Then each reported turn is measured from
    its saved state, in rounds that visit every turn once: one sample varies by
    ±15 % here and the VM's speed drifts over a run, so a turn's figure is the
    median of its rounds and the last/first ratio the median of per-round
    ratios (turns measured seconds apart, not a minute apart)."""
    llm = engine.llama
    reported = reported_turns(turns)
    engine.reset()
    history: list[dict[str, str]] = [{"role": "system", "content": "You are a helpful assistant."}]
    saved: dict[int, KvState | None] = {}
    sizes: list[int] = []
    for turn in range(1, turns + 1):
        history.append(
            {
                "role": "user",
                "content": f"Turn {turn}. Tell me one more detail about the lighthouse, "
                "its keeper and the storms they lived through.",
            }
        )
        if turn in reported:
            saved[turn] = engine.save_state()  # None when empty (turn 1)
        reply = finished(
            engine.stream_reply(
                history, replace(SAMPLING, max_tokens=reply_tokens), threading.Event()
            )
        )
        engine.rebatch_reply()  # as the app does while the user reads a seeded reply
        sizes.append(reply.stats.prompt_tokens)
        history.append({"role": "assistant", "content": reply.text})
    samples: dict[int, list[float]] = {turn: [] for turn in reported}
    prefilled: dict[int, list[float]] = {turn: [] for turn in reported}
    raw: dict[int, list[float]] = {1: [], turns: []}
    raw_prompts = {turn: engine.tokenize_chat(history[: 2 * turn]) for turn in raw}
    for _ in range(rounds):
        for turn in reported:
            messages = history[: 2 * turn]
            put_back(engine, saved[turn])
            samples[turn].append(first_token_s(engine, messages))
            put_back(engine, saved[turn])
            engine.prefill(messages)
            prefilled[turn].append(first_token_s(engine, messages))
            if turn in raw:
                put_back(engine, saved[turn])
                raw[turn].append(raw_first_token_s(llm, raw_prompts[turn]))

    def by_turn(of: dict[int, list[float]]) -> list[float]:
        return [statistics.median(of[t]) if t in of else float("nan") for t in range(1, turns + 1)]

    cold = [float("nan")] * turns  # only the reported turns: a cold turn 20 takes ~20 s
    for turn in reported:
        engine.reset()
        cold[turn - 1] = first_token_s(engine, history[: 2 * turn])

    def last_to_first(of: dict[int, list[float]]) -> float:
        return statistics.median(b / a for a, b in zip(of[1], of[turns], strict=True))

    return Ttft(
        by_turn(samples),
        cold,
        by_turn(prefilled),
        sizes,
        last_to_first(samples),
        last_to_first(raw),
    )


def put_back(engine: LlamaEngine, state: KvState | None) -> None:
    """The KV cache as it was when `state` was saved (empty for None), with
    what the engine knows of how it was evaluated (a seeded reply reuses
    only what batches evaluated: chat.engine.llama, `_prompt_span`)."""
    if state is None:
        engine.reset()
    else:
        engine.restore_state(state)


def raw_first_token_s(llm: Any, prompt: list[int]) -> float:
    """A bare llama-cpp-python client's wait for the first token of `prompt`
    (token ids given): what llama.cpp itself takes, with its prefix reuse."""
    started = time.perf_counter()
    tokens = bare_generate(llm, prompt)
    next(tokens)
    waited = time.perf_counter() - started
    tokens.close()
    return waited


def first_token_s(engine: LlamaEngine, messages: list[dict[str, str]]) -> float:
    """kvchat's wait for the first token of the reply to `messages`, as the
    engine reports it (rendering and tokenizing the prompt included)."""
    # In a chat the engine tokenized the previous turn's prompt last, and reuses
    # its pieces; in these rounds the last prompt was another turn's.
    if len(messages) > 2:
        engine.tokenize_prompt(messages[:-2])
    return first_token_reply(engine, messages).stats.ttft_s


def reported_turns(turns: int) -> list[int]:
    return sorted(t for t in {1, 5, 10, 20, turns} if t <= turns)


def ttft_rows(engine: LlamaEngine, options: Options) -> list[Row]:
    turns = options.turns
    ttft = ttft_by_turn(
        engine,
        turns,
        reply_tokens=110 if not options.quick else 8,
        rounds=TTFT_ROUNDS if not options.quick else 1,
    )
    rows = [
        Row(
            f"TTFT turn {turn} (prompt {ttft.prompt_sizes[turn - 1]:,} tokens)",
            ttft.reused[turn - 1] * 1000,
            "ms",
            note=f"with reset(): {ttft.cold[turn - 1] * 1000:,.0f} ms · "
            f"prefilled: {ttft.prefilled[turn - 1] * 1000:,.1f} ms",
        )
        for turn in reported_turns(turns)
    ]
    ratio_reused = ttft.last_to_first
    ratio_cold = ttft.cold[-1] / ttft.cold[0]
    rows.append(
        Row(
            f"TTFT turn {turns} / turn 1, KV cache reused",
            ratio_reused,
            "x",
            "<= 1.5x",
            ratio_reused <= 1.5,
            "median of rounds measured side by side",
        )
    )
    rows.append(
        Row(
            f"TTFT turn {turns} / turn 1, bare llama-cpp-python",
            ttft.raw_last_to_first,
            "x",
            note="same saved turns, prompt tokens given",
        )
    )
    rows.append(
        Row(
            f"TTFT turn {turns} / turn 1, reset() each turn",
            ratio_cold,
            "x",
            note="what the cache saves",
        )
    )
    return rows
