"""Decode speed: tokens per second once a reply streams.

The same prompt and sampling through four clients of one loaded model: a bare
llama-cpp-python loop (the baseline), kvchat's engine, the engine recording
each token's probabilities, and the whole app, headless, rendering every token.
What kvchat adds on top of llama.cpp shows as the ratio to the raw loop
(target: the app keeps >= 97% of it, docs/performance.md)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from dataclasses import replace

from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY, bare_generate, headless_app, until
from chat.engine.llama import LlamaEngine
from chat.engine.protocol import TokenEvent
from chat.settings.schema import Settings
from chat.ui.widgets.prompt_box import PromptBox


def raw_decode_rate(engine: LlamaEngine, tokens: int) -> float:
    """A minimal streaming client on the same Llama object: generate + detokenize."""
    llm = engine.llama
    engine.reset()
    prompt = engine.tokenize_chat([{"role": "user", "content": STORY}])
    times: list[float] = []
    for token in bare_generate(llm, prompt):
        llm.detokenize([token])
        times.append(time.perf_counter())
        if len(times) >= tokens:
            break
    return (len(times) - 1) / (times[-1] - times[0])


def engine_decode_rate(engine: LlamaEngine, tokens: int, record_probs: bool = False) -> float:
    engine.reset()
    sampling = replace(SAMPLING, max_tokens=tokens)
    times: list[float] = []
    for event in engine.stream_reply(
        [{"role": "user", "content": STORY}], sampling, threading.Event(), record_probs
    ):
        if isinstance(event, TokenEvent) and event.token_id >= 0:
            times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0])


async def app_decode_rate(engine: LlamaEngine, tokens: int) -> float:
    """The full app, headless, rendering every token into the conversation view.
    The rate is measured where the user sees it: tokens rendered on screen (the
    turn drawer's `reply_shown` signal, chat.ui.turn_drawer)."""
    settings = Settings()
    settings.sampling = replace(SAMPLING, max_tokens=tokens)
    settings.chat.record_token_probs = False
    app = headless_app(engine, settings)
    shown: list[tuple[float, int]] = []  # when the UI showed tokens, and how many

    def on_shown(count: int) -> None:
        shown.append((time.perf_counter(), count))

    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await until(lambda: screen.engine is not None)
        # Immediate: timed as the screen publishes, not when the app gets to it.
        screen.drawer.reply_shown.subscribe(app, on_shown, immediate=True)
        app.query_one(PromptBox).insert(STORY)
        await pilot.press("enter")
        await until(lambda: len(screen.conversation.messages) == 2 and not screen.generating, 600)
        await pilot.pause()
    # Tokens after the first batch, over the time from the first batch to the last.
    tokens = sum(count for _, count in shown[1:])
    return tokens / (shown[-1][0] - shown[0][0])


def decode_rows(engine: LlamaEngine, options: Options) -> list[Row]:
    tokens = options.tokens
    # The machine's speed drifts by several % from one run to the next (other
    # tenants of the host), so the runs take turns, round after round: a ratio
    # compares runs of the same round, and the table shows the median ratio.
    rates: dict[str, list[float]] = {"raw": [], "engine": [], "probs": [], "app": []}
    for _ in range(1 if options.quick else 4):
        rates["raw"].append(raw_decode_rate(engine, tokens))
        rates["engine"].append(engine_decode_rate(engine, tokens))
        rates["probs"].append(engine_decode_rate(engine, tokens, record_probs=True))
        rates["app"].append(asyncio.run(app_decode_rate(engine, tokens)))
    raw, eng, probs, app = (statistics.median(rates[k]) for k in ("raw", "engine", "probs", "app"))

    def ratio(of: str, to: str) -> float:
        return statistics.median(a / b for a, b in zip(rates[of], rates[to], strict=True))

    eng_ratio, probs_ratio, app_ratio = (
        ratio("engine", "raw"),
        ratio("probs", "engine"),
        ratio("app", "raw"),
    )
    return [
        Row("decode: raw llama-cpp-python loop", raw, "tok/s"),
        Row("decode: kvchat engine", eng, "tok/s", note=f"{eng_ratio:.1%} of raw"),
        Row(
            "decode: engine recording token probabilities",
            probs,
            "tok/s",
            ">= 95% of engine",
            probs_ratio >= 0.95,
            f"{probs_ratio:.1%} of engine",
        ),
        Row(
            "decode: full app, headless, rendering every token",
            app,
            "tok/s",
            ">= 97% of raw",
            app_ratio >= 0.97,
            f"{app_ratio:.1%} of raw",
        ),
    ]
