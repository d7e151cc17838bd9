"""A reply goes back to vLLM as the ids it was sampled as, against a fake vLLM
on loopback whose model is the real demo model (no vLLM runs here): its
`/tokenize` renders the demo model's chat template and tokenizes with its
tokenizer, its `/v1/completions` samples with it and streams the ids, and its
`cached_tokens` are what vLLM's prefix cache would hold (whole blocks)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.engine.protocol import Finished
from chat.engine.remote.engine import RemoteEngine
from chat.engine.remote.vllm import VllmEngine
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import connect_to, run_reply
from tests.engine.remote.fake_servers import BLOCK_TOKENS, FakeServer, VllmModel, serve

pytestmark = pytest.mark.model

# The benchmark's story, at a seed where the demo model samples `\n\n` as one
# token that its tokenizer makes two of (in this fake's sampler): the reply's
# text tokenizes otherwise than it was sampled.
STORY = [
    {
        "role": "user",
        "content": "Write a long story about a lighthouse keeper and the sea. Use many details.",
    }
]
STORY_SAMPLING = SamplingSettings(temperature=0.8, seed=39, max_tokens=80)
SHORTER = {"role": "user", "content": "Now make it shorter."}
ASK = [{"role": "user", "content": "Name three colours."}]
GREEDY = SamplingSettings(temperature=0, max_tokens=8)
TURN_TWO_MOST = 20 + BLOCK_TOKENS - 1
"""The new message and the template's few tokens around it, and what vLLM's
prefix cache cannot hold of a block it does not fill."""
# A ChatML template that writes a reply otherwise in the history than right
# after the generation prompt (a mark before its text).
MARKED_REPLIES = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}{{ '(earlier) ' }}{% endif %}"
    "{{ m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture
def started(demo_model: Path) -> Iterator[list[FakeServer]]:
    servers: list[FakeServer] = []
    yield servers
    for server in servers:
        server.stop()


def vllm(started: list[FakeServer], demo_model: Path, **options: Any) -> FakeServer:
    """A fresh fake vLLM over the demo model (a fresh cache, so a seed gives
    the same reply in every test)."""
    server = serve(VllmModel(str(demo_model), **options).routes())
    started.append(server)
    return server


def answered(messages: list[dict[str, Any]], reply: Finished) -> list[dict[str, Any]]:
    assert reply.token_ids is not None
    return [*messages, {"role": "assistant", "content": reply.text, "token_ids": reply.token_ids}]


def as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def detokenized(engine: RemoteEngine, ids: list[int]) -> str:
    assert isinstance(engine, VllmEngine)
    return str(engine._http.post_json("/detokenize", {"tokens": ids})["prompt"])


def test_turn_two_sends_the_replys_sampled_ids(started: list[FakeServer], demo_model: Path) -> None:
    server = vllm(started, demo_model)
    engine = connect_to(server)
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    assert first.token_ids is not None and len(first.token_ids) == 80
    second_turn = [*answered(STORY, first), SHORTER]
    sent = engine.tokenize_chat(second_turn)
    as_text_tokens = engine.tokenize_chat(as_text(second_turn))
    # This reply does tokenize otherwise as text: the test would pass without
    # the ids otherwise.
    assert sent != as_text_tokens
    _, second = run_reply(engine, second_turn, GREEDY)
    # The prompt the server got is the one counted: the rendered chat, with
    # the reply's tokens as sampled in their place, reading as the same text.
    prompt = server.last("/v1/completions").body["prompt"]
    assert prompt == sent
    head = engine.tokenize_chat(STORY)
    ids = list(first.token_ids)
    assert sent[: len(head)] == head and sent[len(head) : len(head) + len(ids)] == ids
    assert detokenized(engine, sent) == detokenized(engine, as_text_tokens)
    # The meter counts the same tokens, and the server's cache held the reply.
    assert second.stats.prompt_tokens == len(sent)
    assert second.stats.prompt_evaluated <= TURN_TWO_MOST
    engine.close()


def test_sent_as_text_the_reply_is_evaluated_again(
    started: list[FakeServer], demo_model: Path
) -> None:
    # What a client that sends text costs on the same server: the cache match
    # ends where the reply first tokenizes otherwise.
    engine = connect_to(vllm(started, demo_model))
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    _, second = run_reply(engine, [*as_text(answered(STORY, first)), SHORTER], GREEDY)
    assert second.stats.prompt_evaluated > TURN_TWO_MOST
    engine.close()


def test_a_reply_that_tokenizes_back_reads_the_same(
    started: list[FakeServer], demo_model: Path
) -> None:
    engine = connect_to(vllm(started, demo_model))
    _, first = run_reply(engine, ASK, GREEDY)
    with_ids = [*answered(ASK, first), SHORTER]
    assert engine.tokenize_chat(with_ids) == engine.tokenize_chat(as_text(with_ids))
    # Counted without the generation prompt (the meter's per-message count) too.
    closed = engine.tokenize_chat(with_ids[:2], add_generation_prompt=False)
    assert engine.tokenize_chat(with_ids)[: len(closed)] == closed
    engine.close()


def test_an_edited_reply_or_another_models_ids_go_as_text(
    started: list[FakeServer], demo_model: Path
) -> None:
    engine = connect_to(vllm(started, demo_model))
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    edited = answered(STORY, first)
    edited[-1]["content"] = first.text + " Edited."
    second_turn = [*edited, SHORTER]
    assert engine.tokenize_chat(second_turn) == engine.tokenize_chat(as_text(second_turn))
    ids = first.token_ids or ()
    for foreign in ([7] * len(ids), [10**9] * len(ids)):  # other tokens; ids no vocabulary has
        turn = [*STORY, {"role": "assistant", "content": first.text, "token_ids": foreign}, SHORTER]
        assert engine.tokenize_chat(turn) == engine.tokenize_chat(as_text(turn))
    _, second = run_reply(engine, second_turn, GREEDY)
    assert second.stats.generated_tokens == 8
    engine.close()


def test_a_template_that_writes_replies_otherwise_gets_the_text(
    started: list[FakeServer], demo_model: Path
) -> None:
    engine = connect_to(vllm(started, demo_model, chat_template=MARKED_REPLIES))
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    second_turn = [*answered(STORY, first), SHORTER]
    assert engine.tokenize_chat(second_turn) == engine.tokenize_chat(as_text(second_turn))
    _, second = run_reply(engine, second_turn, GREEDY)
    assert second.text.strip()
    engine.close()


def test_a_reply_cut_by_a_stop_string_keeps_no_ids(
    started: list[FakeServer], demo_model: Path
) -> None:
    engine = connect_to(vllm(started, demo_model))
    _, whole = run_reply(engine, ASK, GREEDY)
    word = whole.text.split()[1]
    stopped = SamplingSettings(temperature=0, max_tokens=8, stop=(word,))
    _, cut = run_reply(engine, ASK, stopped)
    assert word not in cut.text and cut.token_ids is None
    engine.close()


def test_a_vllm_without_return_token_ids_gets_text(
    started: list[FakeServer], demo_model: Path
) -> None:
    server = vllm(started, demo_model, token_ids=False)
    engine = connect_to(server)
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    assert server.last("/v1/completions").body["return_token_ids"] is True
    assert first.token_ids is None and first.text
    engine.close()


def test_a_server_that_refuses_token_id_prompts_is_asked_through_its_chat_api(
    started: list[FakeServer], demo_model: Path
) -> None:
    server = vllm(started, demo_model, token_prompts=False)
    engine = connect_to(server)
    assert isinstance(engine, VllmEngine) and engine.reuse_note is None
    _, first = run_reply(engine, ASK, GREEDY)
    # No error for the user: the reply came through the chat API, as text.
    assert first.text.strip() and first.stats.finish_reason in ("done", "max_tokens")
    assert first.token_ids is None
    assert engine.reuse_note is not None and "token-id prompts" in engine.reuse_note
    completions = [s for s in server.seen if s.path == "/v1/completions"]
    # Found out once: the next turn goes to the chat API straight away.
    second_turn = [*ASK, {"role": "assistant", "content": first.text}, SHORTER]
    _, second = run_reply(engine, second_turn, GREEDY)
    assert second.text.strip()
    assert [s for s in server.seen if s.path == "/v1/completions"] == completions
    assert server.last("/v1/chat/completions").body["messages"][-1] == SHORTER
    engine.close()


def test_a_conversation_reads_no_reply_twice(started: list[FakeServer], demo_model: Path) -> None:
    engine = connect_to(vllm(started, demo_model))
    messages: list[dict[str, Any]] = []
    for turn in range(5):
        messages.append({"role": "user", "content": f"Tell me fact number {turn + 1}."})
        sampling = SamplingSettings(temperature=0.8, seed=turn + 6, max_tokens=40)
        _, reply = run_reply(engine, messages, sampling)
        if turn:
            assert reply.stats.prompt_evaluated <= TURN_TWO_MOST
        messages = answered(messages, reply)
    engine.close()
