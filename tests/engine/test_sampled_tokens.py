"""A reply goes back into the next prompt as the tokens it was sampled as, so
the KV cache that holds them is reused (demo model, SmolLM2-135M, ChatML)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from chat.engine.llama import LlamaEngine
from chat.engine.protocol import ChatMessage, Finished, TokenEvent
from chat.settings.schema import SamplingSettings

pytestmark = pytest.mark.model

SYSTEM: ChatMessage = {"role": "system", "content": "You are a helpful assistant."}
GREEDY = SamplingSettings(temperature=0.0, max_tokens=40)
WARM = SamplingSettings(temperature=0.8, max_tokens=120)
# "Sure! Here is a list.", not in the tokens it tokenizes as.
SPLIT = ("Su", "re! He", "re is a li", "st.")


def run(
    engine: LlamaEngine, messages: Sequence[ChatMessage], sampling: SamplingSettings
) -> tuple[list[int], Finished]:
    """The ids of the streamed tokens, and the `Finished` event."""
    ids: list[int] = []
    finished = None
    for event in engine.stream_reply(messages, sampling, threading.Event()):
        if isinstance(event, TokenEvent):
            if event.token_id >= 0:
                ids.append(event.token_id)
        else:
            finished = event
    assert finished is not None
    return ids, finished


def reply(finished: Finished, with_ids: bool = True) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": finished.text}
    if with_ids and finished.token_ids is not None:
        message["token_ids"] = list(finished.token_ids)
    return message


def spell(engine: LlamaEngine, ids: Sequence[int]) -> str:
    return bytes(engine.llama.detokenize(list(ids), special=True)).decode()


def split_tokens(engine: LlamaEngine, *texts: str) -> list[int]:
    """Ids that spell "".join(texts) but are not how that text tokenizes: as
    a model may sample them."""
    ids = [i for text in texts for i in engine.chat_prompt.tokenize_text(text.encode(), False)]
    assert ids != engine.chat_prompt.tokenize_text("".join(texts).encode(), False)
    return ids


def test_finished_carries_the_sampled_tokens(engine: LlamaEngine) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Name three fruits."}]
    streamed, finished = run(engine, messages, GREEDY)
    assert finished.token_ids == tuple(streamed)
    assert spell(engine, finished.token_ids) == finished.text


def test_a_reply_sent_as_its_sampled_tokens_evaluates_only_the_new_message(
    engine: LlamaEngine,
) -> None:
    # A reply whose text tokenizes otherwise than it was sampled (the issue saw
    # one at turn 2: 79 of 152 tokens evaluated instead of ~18).
    question = [SYSTEM, {"role": "user", "content": "Give me three tips for sleeping well."}]
    follow_up: ChatMessage = {"role": "user", "content": "Tell me more."}
    for seed in range(8):
        engine.reset()
        sampled, first = run(engine, question, replace(WARM, seed=seed))
        turn2 = [*question, reply(first), follow_up]
        as_text = [*question, reply(first, with_ids=False), follow_up]
        if engine.tokenize_chat(turn2) != engine.tokenize_chat(as_text):
            break
    else:
        pytest.fail("no reply in 8 seeds tokenizes otherwise than it was sampled")
    assert first.token_ids == tuple(sampled)
    # The cache holds the question and every sampled token (the last one too
    # when the end-of-turn token came after it).
    cached = first.stats.prompt_tokens + len(sampled) - (first.stats.finish_reason != "done")
    new_tokens = len(engine.tokenize_chat(turn2)) - cached
    # Not repeatable (random seed): a repeatable reply would evaluate the first
    # again, in a batch, unless the app had done so while the user read it
    # (tests/engine/test_kv_state.py).
    _, second = run(engine, turn2, replace(WARM, max_tokens=4))
    assert second.stats.prompt_tokens == len(engine.tokenize_chat(turn2))
    assert second.stats.prompt_evaluated == new_tokens
    assert new_tokens < 25  # "<|im_end|>", the new message and the template around it

    # The same turn with the reply's text tokenized again leaves the cache at
    # the first token that differs.
    engine.reset()
    run(engine, question, replace(WARM, seed=seed))
    _, as_text_second = run(engine, as_text, replace(WARM, max_tokens=4))
    assert as_text_second.stats.prompt_evaluated > new_tokens + 5


def thanked_for(ids: list[int]) -> list[ChatMessage]:
    """A conversation whose reply was sampled as `ids`, and a message after it."""
    return [
        SYSTEM,
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Sure! Here is a list.", "token_ids": ids},
        {"role": "user", "content": "Thanks"},
    ]


def test_sampled_tokens_stand_for_the_reply_in_the_prompt(engine: LlamaEngine) -> None:
    ids = split_tokens(engine, *SPLIT)
    messages = thanked_for(ids)
    opening = engine.chat_prompt.tokenize_text(b"<|im_start|>assistant\n", False)
    head = engine.tokenize_chat(messages[:2])
    assert head[-len(opening) :] == opening
    tail = engine.chat_prompt.tokenize_text(
        b"<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n", False
    )
    assert engine.tokenize_chat(messages, False) == head + ids + tail


@pytest.mark.parametrize(
    "token_ids",
    [
        "edited",  # the ids of another text: the reply was edited
        [49152],  # past the end of the vocabulary: another model's ids
        [-1],
        [1.5],
        [True],
        "not a list",
        [],
    ],
)
def test_tokens_that_do_not_spell_the_reply_are_ignored(
    engine: LlamaEngine, token_ids: Any
) -> None:
    content = "Sure! Here is a list."
    if token_ids == "edited":
        token_ids = split_tokens(engine, "Su", "re! He", "re is the li", "st.")
    elif isinstance(token_ids, list) and token_ids:
        token_ids = split_tokens(engine, *SPLIT) + token_ids
    history = [SYSTEM, {"role": "user", "content": "Hi"}]
    as_text = [*history, {"role": "assistant", "content": content}]
    with_ids = [*history, {"role": "assistant", "content": content, "token_ids": token_ids}]
    assert engine.tokenize_chat(with_ids) == engine.tokenize_chat(as_text)
    assert engine.tokenize_prompt(with_ids) == engine.tokenize_chat(as_text)


def test_only_replies_are_sent_as_tokens(engine: LlamaEngine) -> None:
    ids = split_tokens(engine, *SPLIT)
    as_text: list[ChatMessage] = [SYSTEM, {"role": "user", "content": "Sure! Here is a list."}]
    with_ids = [SYSTEM, {**as_text[1], "token_ids": ids}]
    assert engine.tokenize_chat(with_ids) == engine.tokenize_chat(as_text)


def test_the_meter_counts_what_is_sent(engine: LlamaEngine) -> None:
    ids = split_tokens(engine, *SPLIT)
    messages = thanked_for(ids)
    counted = engine.tokenize_chat(messages)
    assert engine.tokenize_prompt(messages) == counted  # piece by piece, as a reply sends it
    assert engine.tokenize_prompt(messages) == counted  # its remembered pieces again
    _, finished = run(engine, messages, replace(GREEDY, max_tokens=2))
    assert finished.stats.prompt_tokens == len(counted)
    assert engine.llama.input_ids[: len(counted)].tolist() == counted


def test_the_template_sees_role_and_content_only(
    engine: LlamaEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    formatters = dict(engine.chat_prompt.formatters)

    def recording(add_generation_prompt: bool) -> Any:
        def render(messages: list[dict[str, Any]]) -> Any:
            seen.extend(messages)
            return formatters[add_generation_prompt](messages=messages)

        return render

    recorders = {flag: recording(flag) for flag in (True, False)}
    monkeypatch.setattr(engine.chat_prompt, "formatters", recorders)
    ids = split_tokens(engine, *SPLIT)
    engine.tokenize_chat(
        [SYSTEM, {"role": "assistant", "content": "Sure! Here is a list.", "token_ids": ids}]
    )
    assert seen and all(set(message) == {"role", "content"} for message in seen)


def test_a_template_that_rewrites_replies_gets_their_text(
    engine: LlamaEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As templates that drop a reply's reasoning do: the ids would no longer
    # be the text the template writes.
    template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{{ message['content'] | replace('Sure', 'Yes') }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    monkeypatch.setattr(
        engine.chat_prompt,
        "formatters",
        {
            flag: Jinja2ChatFormatter(template, "", "", add_generation_prompt=flag)
            for flag in (True, False)
        },
    )
    ids = split_tokens(engine, *SPLIT)
    history = [SYSTEM, {"role": "user", "content": "Hi"}]
    as_text = [*history, {"role": "assistant", "content": "Sure! Here is a list."}]
    with_ids = [*history, {**as_text[-1], "token_ids": ids}]
    assert engine.tokenize_chat(with_ids) == engine.tokenize_chat(as_text)
    assert b"Yes! Here" in bytes(engine.llama.detokenize(engine.tokenize_chat(with_ids)))


def test_a_stop_sequence_keeps_the_tokens_before_it(engine: LlamaEngine) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Name three fruits."}]
    sampled, _ = run(engine, messages, GREEDY)
    pieces = [spell(engine, [token]) for token in sampled]
    text = "".join(pieces)
    # A word after the first few, as one token with its space (" apples").
    at = next(k for k in range(3, len(pieces) - 1) if pieces[k][:1] == " " and len(pieces[k]) > 3)
    before = "".join(pieces[:at])
    # A stop sequence that begins where a token begins: the reply ends before it.
    stop = pieces[at] + pieces[at + 1]
    assert text.find(stop) == len(before)
    _, cut = run(engine, messages, replace(GREEDY, stop=[stop]))
    assert cut.text == before
    assert cut.token_ids == tuple(sampled[:at])
    # One that begins inside a token: no run of tokens spells the reply.
    _, mid = run(engine, messages, replace(GREEDY, stop=[stop[1:]]))
    assert mid.text == before + " "
    assert mid.token_ids is None


def test_a_sanitised_reply_has_no_tokens(engine: LlamaEngine) -> None:
    # Terminal escapes are removed from what is shown and saved; the tokens
    # that carried them no longer spell the text.
    sampled = engine.chat_prompt.tokenize_text(b"red \x1b[31mtext", False)
    assert engine._spelling_tokens(sampled, "red text") is None
    assert engine._spelling_tokens(sampled, "red \x1b[31mtext") == tuple(sampled)
