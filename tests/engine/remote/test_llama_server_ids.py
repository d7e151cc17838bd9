"""A reply goes back to llama-server as the ids it was sampled as, against a
real llama-server (built by .ci/llama-server) serving the demo model on
loopback: the slot's cache then holds the whole conversation, and the
server evaluates only the new message. The figures are the server's own
(`timings.prompt_n` evaluated, `cache_n` reused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.engine.remote.engine import RemoteEngine
from chat.session.context_window import ContextBudget
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import (
    ASK,
    SHORTER,
    STORY,
    answered,
    as_text,
    connect_to,
    run_reply,
)
from tests.servers import RunningServer, free_port, llama_server

pytestmark = pytest.mark.model

# At seed 1234 the story's reply tokenizes otherwise than it was sampled.
STORY_SAMPLING = SamplingSettings(temperature=0.8, seed=1234, max_tokens=80)
GREEDY = SamplingSettings(temperature=0, max_tokens=24)
TURN_TWO_MOST = 20
"""The new message and the template's few tokens around it."""


def test_turn_two_evaluates_only_the_new_message(engine: RemoteEngine) -> None:
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    second_turn = [*answered(STORY, first), SHORTER]
    sent = engine.tokenize_chat(second_turn)
    as_text_tokens = engine.tokenize_chat(as_text(second_turn))
    # This reply does tokenize otherwise as text: the test would pass without
    # the ids otherwise.
    assert sent != as_text_tokens
    _, second = run_reply(engine, second_turn, SamplingSettings(temperature=0, max_tokens=8))
    assert second.stats.prompt_evaluated <= TURN_TWO_MOST
    # The meter counts what the server was sent.
    assert second.stats.prompt_tokens == len(sent)
    # Only the reply's part differs from the text prompt.
    head = engine.tokenize_chat(STORY)
    assert sent[: len(head)] == as_text_tokens[: len(head)] == head
    assert sent[len(head) : len(head) + len(first.token_ids or ())] == list(first.token_ids or ())
    tail = len(sent) - len(head) - len(first.token_ids or ())
    assert sent[-tail:] == as_text_tokens[-tail:]


def test_the_reply_as_sent_reads_as_the_text_at_temperature_zero(engine: RemoteEngine) -> None:
    # A short greedy reply that its text tokenizes back to: the prompt with
    # its ids is the text's prompt, token for token, and so is the reply.
    _, first = run_reply(engine, ASK, GREEDY)
    with_ids = [*answered(ASK, first), SHORTER]
    assert engine.tokenize_chat(with_ids) == engine.tokenize_chat(as_text(with_ids))
    _, from_ids = run_reply(engine, with_ids, GREEDY)
    _, from_text = run_reply(engine, as_text(with_ids), GREEDY)
    assert from_ids.text == from_text.text and from_ids.text.strip()


def test_a_counted_reply_is_the_start_of_the_next_prompt(engine: RemoteEngine) -> None:
    # The meter counts a reply on its own (closed, no generation prompt): the
    # same tokens the next prompt starts with, ids and all.
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    history = answered(STORY, first)
    closed = engine.tokenize_chat(history, add_generation_prompt=False)
    following = engine.tokenize_chat([*history, SHORTER])
    assert following[: len(closed)] == closed
    assert closed != engine.tokenize_chat(as_text(history), add_generation_prompt=False)


def test_the_meter_counts_the_prompt_the_server_is_sent(engine: RemoteEngine) -> None:
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    assert first.token_ids is not None
    messages = [
        Message("user", STORY[0]["content"]),
        Message("assistant", first.text, token_ids=list(first.token_ids)),
    ]
    plan = ContextBudget(engine.tokenize_chat, engine.info.n_ctx).plan(
        "", messages, SHORTER["content"], 8, "stop"
    )
    sent = engine.tokenize_chat([*answered(STORY, first), SHORTER])
    assert plan.problem is None and plan.used == len(sent)
    _, second = run_reply(engine, [*answered(STORY, first), SHORTER], GREEDY)
    assert second.stats.prompt_tokens == plan.used


def test_an_edited_reply_goes_as_text(engine: RemoteEngine) -> None:
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    edited = answered(STORY, first)
    edited[-1]["content"] = first.text.replace("the", "a", 1) + " Edited."
    second_turn = [*edited, SHORTER]
    assert engine.tokenize_chat(second_turn) == engine.tokenize_chat(as_text(second_turn))
    # Another model's ids (the right count, other tokens) are not taken either.
    foreign = [
        *STORY,
        {"role": "assistant", "content": first.text, "token_ids": [7] * len(first.token_ids or ())},
        SHORTER,
    ]
    assert engine.tokenize_chat(foreign) == engine.tokenize_chat(as_text(foreign))
    _, second = run_reply(engine, second_turn, SamplingSettings(temperature=0, max_tokens=4))
    assert second.stats.generated_tokens == 4


def test_a_reopened_conversation_still_sends_the_ids(server: RunningServer, tmp_path: Path) -> None:
    engine = connect_to(server)
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    engine.close()
    assert first.token_ids is not None
    conversation = Conversation(
        messages=[
            Message("user", STORY[0]["content"]),
            Message("assistant", first.text, token_ids=list(first.token_ids)),
        ]
    )
    with Store(tmp_path / "conversations.db") as store:
        saved = store.create_conversation(conversation)
    with Store(tmp_path / "conversations.db") as store:
        reopened = store.get_conversation(saved)
    messages = [m.as_chat_dict() for m in reopened.messages]
    assert messages[-1]["token_ids"] == list(first.token_ids)
    again = connect_to(server)  # a new connection, as a restarted kvchat has
    try:
        _, second = run_reply(again, [*messages, SHORTER], GREEDY)
        assert second.stats.prompt_evaluated <= TURN_TWO_MOST
    finally:
        again.close()


def test_a_restarted_server_with_an_empty_cache_reads_it_all(tmp_path: Path) -> None:
    port = free_port()
    with llama_server(tmp_path, port=port) as first_server:
        engine = connect_to(first_server)
        _, first = run_reply(engine, STORY, STORY_SAMPLING)
        engine.close()
    with llama_server(tmp_path, port=port):
        engine = connect_to(first_server)  # the same URL
        try:
            second_turn = [*answered(STORY, first), SHORTER]
            sent = engine.tokenize_chat(second_turn)
            _, second = run_reply(engine, second_turn, GREEDY)
            stats = second.stats
            assert stats.prompt_evaluated == stats.prompt_tokens == len(sent)
            assert second.text.strip() and stats.finish_reason in ("done", "max_tokens")
        finally:
            engine.close()
