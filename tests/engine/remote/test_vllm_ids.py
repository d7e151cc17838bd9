"""A reply goes back to vLLM as the ids it was sampled as, against a fake vLLM
on loopback whose model is the real demo model, for what a real vLLM here
cannot play (tests/engine/remote/test_vllm.py runs one): an older vLLM, a
gateway that refuses token-id prompts, another chat template. Its
`/tokenize` renders the demo model's chat template and tokenizes with its
tokenizer, its `/v1/completions` samples with it and streams the ids, and its
`cached_tokens` are what vLLM's prefix cache would hold (whole blocks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.engine.remote.engine import RemoteEngine
from chat.engine.remote.vllm import VllmEngine
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
from tests.engine.remote.fake_servers import BLOCK_TOKENS, FakeServer, VllmModel, serve

pytestmark = pytest.mark.model

# At this seed (in this fake's sampler, from a fresh cache) the story's reply
# tokenizes otherwise than it was sampled, early in the reply.
STORY_SAMPLING = SamplingSettings(temperature=0.8, seed=39, max_tokens=80)
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


OpenVllm = Callable[..., tuple[FakeServer, RemoteEngine]]


@pytest.fixture
def vllm(demo_model: Path) -> Iterator[OpenVllm]:
    """Opens a fresh fake vLLM over the demo model (a fresh cache: a seed
    gives the same reply in every test) and an engine connected to it."""
    opened: list[tuple[FakeServer, RemoteEngine]] = []

    def open_vllm(**options: Any) -> tuple[FakeServer, RemoteEngine]:
        server = serve(VllmModel(str(demo_model), **options).routes())
        opened.append((server, connect_to(server)))
        return opened[-1]

    yield open_vllm
    for server, engine in opened:
        engine.close()
        server.stop()


def detokenized(engine: RemoteEngine, ids: list[int]) -> str:
    assert isinstance(engine, VllmEngine)
    return str(engine._http.post_json("/detokenize", {"tokens": ids})["prompt"])


def test_turn_two_sends_the_replys_sampled_ids(vllm: OpenVllm) -> None:
    server, engine = vllm()
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


def test_sent_as_text_the_reply_is_evaluated_again(vllm: OpenVllm) -> None:
    # What a client that sends text costs on the same server: the cache match
    # ends where the reply first tokenizes otherwise.
    _, engine = vllm()
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    _, second = run_reply(engine, [*as_text(answered(STORY, first)), SHORTER], GREEDY)
    assert second.stats.prompt_evaluated > TURN_TWO_MOST


def test_a_reply_that_tokenizes_back_reads_the_same(vllm: OpenVllm) -> None:
    _, engine = vllm()
    _, first = run_reply(engine, ASK, GREEDY)
    with_ids = [*answered(ASK, first), SHORTER]
    assert engine.tokenize_chat(with_ids) == engine.tokenize_chat(as_text(with_ids))
    # Counted without the generation prompt (the meter's per-message count) too.
    closed = engine.tokenize_chat(with_ids[:2], add_generation_prompt=False)
    assert engine.tokenize_chat(with_ids)[: len(closed)] == closed


def test_an_edited_reply_or_another_models_ids_go_as_text(vllm: OpenVllm) -> None:
    _, engine = vllm()
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


def test_a_template_that_writes_replies_otherwise_gets_the_text(vllm: OpenVllm) -> None:
    _, engine = vllm(chat_template=MARKED_REPLIES)
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    second_turn = [*answered(STORY, first), SHORTER]
    assert engine.tokenize_chat(second_turn) == engine.tokenize_chat(as_text(second_turn))
    _, second = run_reply(engine, second_turn, GREEDY)
    assert second.text.strip()


def test_a_reply_cut_by_a_stop_string_keeps_no_ids(vllm: OpenVllm) -> None:
    _, engine = vllm()
    _, whole = run_reply(engine, ASK, GREEDY)
    word = whole.text.split()[1]
    stopped = SamplingSettings(temperature=0, max_tokens=8, stop=(word,))
    _, cut = run_reply(engine, ASK, stopped)
    assert word not in cut.text and cut.token_ids is None


def test_a_vllm_without_return_token_ids_gets_text(vllm: OpenVllm) -> None:
    server, engine = vllm(token_ids=False)
    _, first = run_reply(engine, STORY, STORY_SAMPLING)
    assert server.last("/v1/completions").body["return_token_ids"] is True
    assert first.token_ids is None and first.text


def test_a_server_refusing_token_id_prompts_is_asked_through_its_chat_api(
    vllm: OpenVllm,
) -> None:
    server, engine = vllm(token_prompts=False)
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


def test_a_conversation_reads_no_reply_twice(vllm: OpenVllm) -> None:
    _, engine = vllm()
    messages: list[dict[str, Any]] = []
    for turn in range(5):
        messages.append({"role": "user", "content": f"Tell me fact number {turn + 1}."})
        sampling = SamplingSettings(temperature=0.8, seed=turn + 6, max_tokens=40)
        _, reply = run_reply(engine, messages, sampling)
        if turn:
            assert reply.stats.prompt_evaluated <= TURN_TWO_MOST
        messages = answered(messages, reply)


def test_a_long_conversation_is_counted_again_with_one_request(vllm: OpenVllm) -> None:
    # Each reply's place is found once; a new draft after it costs one
    # `/tokenize` of the whole chat (the same as for its text), however many
    # replies went as ids.
    server, engine = vllm()
    assert isinstance(engine, VllmEngine)
    messages: list[dict[str, Any]] = []
    for turn in range(30):
        reply = f"Fact {turn}:\n\nthe sea is deep."
        ids = engine._http.post_json("/tokenize", {"prompt": reply, "add_special_tokens": False})
        messages += [
            {"role": "user", "content": f"Tell me fact {turn}."},
            {"role": "assistant", "content": reply, "token_ids": ids["tokens"]},
        ]
    engine.tokenize_chat([*messages, SHORTER])
    asked = len(server.seen)
    draft = {"role": "user", "content": "And one more."}
    assert engine.tokenize_chat([*messages, draft]) == engine.tokenize_chat(
        as_text([*messages, draft])
    )
    assert [s.path for s in server.seen[asked:]] == ["/tokenize"]
