"""Continuing a cut reply with the real demo model: the model goes on from the
reply's last token, with no end-of-turn token between, and the KV cache that
holds the reply is reused (only the last sampled token is evaluated)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from chat.engine.llama import LlamaEngine
from chat.engine.protocol import ChatMessage, Finished, TokenEvent
from chat.errors import KvchatError
from chat.settings.schema import SamplingSettings

pytestmark = pytest.mark.model

GREEDY = SamplingSettings(temperature=0.0, max_tokens=12)
LOOSE = SamplingSettings(temperature=0.7, max_tokens=12)
"""Not repeatable (a random seed): the KV cache is reused as it is."""
QUESTION: list[ChatMessage] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Describe the water cycle in a few sentences."},
]


def reply(
    engine: LlamaEngine,
    messages: list[ChatMessage],
    sampling: SamplingSettings = GREEDY,
    *,
    continue_last: bool = False,
) -> tuple[str, Finished]:
    cancel = threading.Event()
    text = ""
    finished = None
    for event in engine.stream_reply(messages, sampling, cancel, continue_last=continue_last):
        if isinstance(event, TokenEvent):
            text += event.text
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    return text, finished


def as_cut_reply(finished: Finished) -> ChatMessage:
    """The reply `finished` ended, as the last message of a prompt, with the
    tokens it was sampled as."""
    assert finished.token_ids is not None
    return {"role": "assistant", "content": finished.text, "token_ids": list(finished.token_ids)}


def test_continuing_evaluates_only_the_new_tokens_and_goes_on(engine: LlamaEngine) -> None:
    engine.reset()
    _, cut = reply(engine, QUESTION, LOOSE)
    assert cut.stats.finish_reason == "max_tokens"
    assert cut.token_ids is not None
    streamed, more = reply(engine, [*QUESTION, as_cut_reply(cut)], LOOSE, continue_last=True)
    assert streamed == more.text and more.text
    # Only the reply's last token (sampled, never evaluated) is new to the cache.
    assert more.stats.prompt_evaluated == 1
    assert more.stats.prompt_tokens == cut.stats.prompt_tokens + cut.stats.generated_tokens
    # Together their tokens spell the whole, to be sent as one reply next turn.
    assert more.token_ids is not None
    whole = (*cut.token_ids, *more.token_ids)
    assert engine.chat_prompt.spell(whole).decode() == cut.text + more.text


def test_a_repeatable_continuation_is_the_same_warm_or_from_scratch(engine: LlamaEngine) -> None:
    """Greedy (or a fixed seed): the continuation does not depend on what the
    KV cache held, as for a new message (tests/engine/test_kv_state.py)."""
    engine.reset()
    _, cut = reply(engine, QUESTION)
    assert cut.stats.finish_reason == "max_tokens"
    assert engine.rebatch_reply()  # as the app does while the user reads
    messages = [*QUESTION, as_cut_reply(cut)]
    _, warm = reply(engine, messages, continue_last=True)
    # The last token is new to the cache; a repeatable prompt's batch is never
    # a single token, so the one before goes again with it.
    assert warm.stats.prompt_evaluated == 2
    engine.reset()
    _, cold = reply(engine, messages, continue_last=True)
    assert cold.stats.prompt_evaluated == cold.stats.prompt_tokens
    assert cold.text == warm.text and cold.token_ids == warm.token_ids
    # Sent at once, before the app's background pass: the cut reply goes again.
    engine.reset()
    reply(engine, QUESTION)
    _, at_once = reply(engine, messages, continue_last=True)
    assert at_once.text == warm.text
    assert at_once.stats.prompt_evaluated == cut.stats.generated_tokens  # all of it


def test_the_prompt_leaves_the_reply_open(engine: LlamaEngine) -> None:
    cut_reply: ChatMessage = {"role": "assistant", "content": "The water cycle is"}
    messages = [*QUESTION, cut_reply]
    closed = engine.tokenize_chat(messages, add_generation_prompt=False)
    text = engine.chat_prompt.spell(closed).decode()
    assert text.endswith("The water cycle is<|im_end|>\n")
    engine.reset()
    _, more = reply(engine, messages, continue_last=True)
    # No end-of-turn token: the model goes on with the sentence, not a new turn.
    assert more.text and not more.text.startswith("<|im_start|>")
    # A reply without its sampled tokens goes as text, which the cache does not hold yet.
    assert more.stats.prompt_evaluated == more.stats.prompt_tokens
    assert more.stats.prompt_tokens == len(closed) - 2  # without "<|im_end|>", "\n"


def test_a_stopped_reply_continues_too(engine: LlamaEngine) -> None:
    engine.reset()
    cancel = threading.Event()
    finished = None
    for count, event in enumerate(
        engine.stream_reply(QUESTION, replace(GREEDY, max_tokens=40), cancel)
    ):
        if isinstance(event, TokenEvent) and count >= 5:
            cancel.set()
        if isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.stats.finish_reason == "stopped"
    _, more = reply(engine, [*QUESTION, as_cut_reply(finished)], LOOSE, continue_last=True)
    assert more.stats.prompt_evaluated == 1
    assert more.text


def test_only_a_reply_can_be_continued(engine: LlamaEngine) -> None:
    with pytest.raises(KvchatError, match="Only a reply"):
        reply(engine, QUESTION, continue_last=True)
