"""Prompt progress with the real demo model: a prompt of several batches
reports each one, and Esc between batches stops the reply with what was
evaluated kept in the KV cache."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from chat.engine.llama import LlamaEngine
from chat.engine.protocol import Finished, PromptProgress, TokenEvent
from chat.settings.schema import SamplingSettings

pytestmark = pytest.mark.model

GREEDY = SamplingSettings(temperature=0.0, max_tokens=8)


def long_prompt(words: int, topic: str = "river") -> list[dict[str, str]]:
    """A user message of about `words` tokens (several batches of 512)."""
    text = " ".join(f"{topic}{i % 50}" for i in range(words))
    return [{"role": "user", "content": f"Summarise: {text}"}]


def collect(
    engine: LlamaEngine,
    messages: list[dict[str, str]],
    cancel_at_progress: int | None = None,
) -> tuple[list[PromptProgress], list[TokenEvent], Finished]:
    cancel = threading.Event()
    progress: list[PromptProgress] = []
    tokens: list[TokenEvent] = []
    finished = None
    for event in engine.stream_reply(messages, GREEDY, cancel):
        if isinstance(event, PromptProgress):
            progress.append(event)
            if cancel_at_progress is not None and len(progress) > cancel_at_progress:
                cancel.set()
        elif isinstance(event, TokenEvent):
            tokens.append(event)
        else:
            finished = event
    assert finished is not None
    return progress, tokens, finished


def test_progress_counts_up_to_the_prompt_batch_by_batch(engine: LlamaEngine) -> None:
    engine.reset()
    messages = long_prompt(400)
    prompt = engine.tokenize_chat(messages)
    assert len(prompt) > 2 * 512
    progress, tokens, finished = collect(engine, messages)
    total = len(prompt)
    assert [p.done for p in progress] == [*range(0, total, 512), total]
    assert {p.total for p in progress} == {total}
    assert progress[0].rate is None
    assert all(p.rate is not None and p.rate > 0 for p in progress[1:])
    assert progress[-1].seconds_left == 0
    assert progress[1].seconds_left is not None and progress[1].seconds_left > 0
    # The reply is the one it would be anyway, and every prompt token was counted.
    assert tokens and finished.stats.finish_reason in ("done", "max_tokens")
    assert finished.stats.prompt_evaluated == total


def test_only_the_uncached_part_is_reported(engine: LlamaEngine) -> None:
    engine.reset()
    messages = long_prompt(400)
    collect(engine, messages)
    reply = [*messages, {"role": "assistant", "content": "Rivers."}]
    progress, _, finished = collect(engine, [*reply, {"role": "user", "content": "Shorter?"}])
    assert finished.stats.prompt_evaluated < 40
    assert progress[-1].total == finished.stats.prompt_evaluated
    assert [p.done for p in progress] == [0, progress[-1].total]


def test_cancel_between_batches_keeps_what_was_evaluated(engine: LlamaEngine) -> None:
    engine.reset()
    messages = long_prompt(500, topic="lake")
    prompt = engine.tokenize_chat(messages)
    # Cancelled once the first batch is evaluated: the second one is not.
    progress, tokens, finished = collect(engine, messages, cancel_at_progress=1)
    assert [p.done for p in progress] == [0, 512]
    assert tokens == []
    assert finished.text == ""
    assert finished.stats.finish_reason == "stopped"
    assert finished.stats.generated_tokens == 0
    assert finished.stats.prompt_evaluated == 512
    assert engine.cached_prefix(prompt) == 512
    # Sent again, it resumes after the batch evaluated, and replies as it
    # would have without the stop (the same batches, so the same logits).
    again_progress, again_tokens, again = collect(engine, messages)
    assert again.stats.prompt_evaluated == len(prompt) - 512
    assert again_progress[-1].total == len(prompt) - 512
    engine.reset()
    _, _, fresh = collect(engine, messages)
    assert again.text == fresh.text and again_tokens


def test_cancel_before_the_first_batch_evaluates_nothing(engine: LlamaEngine) -> None:
    engine.reset()
    messages = long_prompt(300, topic="sea")
    cancel = threading.Event()
    cancel.set()
    events = list(engine.stream_reply(messages, replace(GREEDY, max_tokens=4), cancel))
    assert [type(e) for e in events] == [PromptProgress, Finished]
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.stats.finish_reason == "stopped"
    assert finished.stats.prompt_evaluated == 0
    assert engine.cached_prefix(engine.tokenize_chat(messages)) == 0


def test_a_reply_sent_during_a_prefill_takes_over_at_the_next_batch(
    engine: LlamaEngine,
) -> None:
    """A reopened conversation is evaluated ahead (a prefill of its whole
    batches); a reply sent meanwhile does not wait for all of it, silently: the
    prefill stops after its batch, and the reply evaluates the rest with
    progress. The reply is the one it would have been."""
    engine.reset()
    history = [*long_prompt(500, topic="hill"), {"role": "assistant", "content": "Hills."}]
    messages = [*history, {"role": "user", "content": "More?"}]
    prompt = engine.tokenize_chat(messages)
    prefilled: list[bool] = []
    prefill = threading.Thread(target=lambda: prefilled.append(engine.prefill(history, False)))
    prefill.start()
    while not engine._prefilling and prefill.is_alive():
        time.sleep(0.001)  # a poll: the prefill takes the lock at once
    progress, tokens, finished = collect(engine, messages)
    prefill.join()
    assert prefilled == [False]  # stopped before its end
    evaluated_ahead = len(prompt) - progress[-1].total
    assert evaluated_ahead % 512 == 0 and evaluated_ahead < 1024
    assert [p.done for p in progress][-1] == len(prompt) - evaluated_ahead
    assert finished.stats.prompt_evaluated == len(prompt) - evaluated_ahead
    engine.reset()
    _, _, fresh = collect(engine, messages)
    assert finished.text == fresh.text and tokens
