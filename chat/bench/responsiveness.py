"""Responsiveness while a reply streams: what typing costs.

A reply streams on a thread that shares the GIL with the UI; a keypress must
still reach the screen in under 50 ms (docs/performance.md, "Targets"). And each keystroke updates
the context meter, which counts the whole conversation's tokens: with a long
history that count must stay under 50 ms too."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import replace

from textual import events

from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY, headless_app, until
from chat.conversations.conversation import Message
from chat.engine.llama import LlamaEngine
from chat.session.context_window import ContextBudget
from chat.settings.schema import Settings
from chat.ui.widgets.prompt_box import PromptBox


async def keypress_latency(engine: LlamaEngine, presses: int) -> list[float]:
    """Seconds from a key event to the refresh of the prompt box that shows
    it, with a long reply streaming."""
    settings = Settings()
    settings.sampling = replace(SAMPLING, max_tokens=100_000)
    app = headless_app(engine, settings)
    latencies: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await until(lambda: screen.engine is not None)
        box = app.query_one(PromptBox)
        box.insert(STORY)
        await pilot.press("enter")
        await until(lambda: screen.generating and len(box.text) == 0)
        await pilot.pause(0.3)  # well into the stream
        for i in range(presses):
            # Pilot.press waits for the app to go idle, which a stream never
            # does: post the key as the terminal driver would, and watch for it.
            before = len(box.text)
            char = "ab"[i % 2]
            started = time.perf_counter()
            app.post_message(events.Key(char, char))
            while len(box.text) <= before:
                await asyncio.sleep(0.0005)
            # Then wait for the frame that shows it: the box's next refresh.
            await box.wait_for_refresh()
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
        screen.action_stop()
        await until(lambda: not screen.generating)
    return latencies


def meter_update_times(
    engine: LlamaEngine, history_tokens: int, keystrokes: int
) -> tuple[list[float], int]:
    """What a keystroke costs the context meter with a long history."""
    budget = ContextBudget(engine.tokenize_chat, 1_000_000)
    messages: list[Message] = []
    total = 0
    while total < history_tokens:
        messages.append(
            Message(
                "user" if len(messages) % 2 == 0 else "assistant",
                "The keeper climbed the stairs again to light the lamp. " * 6,
            )
        )
        total = sum(budget.count_messages("You are a helpful assistant.", messages))
    times = []
    typed = ""
    for i in range(keystrokes):
        typed += "abcdefgh "[i % 9]
        started = time.perf_counter()
        budget.plan("You are a helpful assistant.", messages, typed, 1024, "drop-oldest")
        times.append(time.perf_counter() - started)
    return times, total


def responsiveness_rows(engine: LlamaEngine, options: Options) -> list[Row]:
    latencies = asyncio.run(keypress_latency(engine, 10 if options.quick else 40))
    meter, history = meter_update_times(engine, 800 if options.quick else 8000, 50)
    return [
        Row(
            "keypress to screen while streaming, median",
            statistics.median(latencies) * 1000,
            "ms",
            "< 50 ms",
            statistics.median(latencies) < 0.05,
        ),
        Row("keypress to screen while streaming, worst", max(latencies) * 1000, "ms"),
        Row(
            f"context meter update per keystroke ({history:,} tokens of history), median",
            statistics.median(meter) * 1000,
            "ms",
            "< 50 ms",
            max(meter) < 0.05,
            f"worst {max(meter) * 1000:.1f} ms",
        ),
    ]
