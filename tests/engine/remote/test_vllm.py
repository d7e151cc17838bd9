"""The vLLM engine against a real vLLM on loopback (issue 33 point 3): vLLM's
CPU build with the demo model (`.ci/vllm` installs both; tests/servers.py
starts it). A reply goes back as the ids it was sampled as, and vLLM's prefix
cache then holds all of it: the next turn evaluates the new message, the
template's tokens around it and what the cache cannot hold of a block it does
not fill. The same conversation sent as text (what a client that keeps no ids
sends) is evaluated again from where its reply tokenizes otherwise.
(tests/engine/remote/test_vllm_ids.py covers what a fake can play: old vLLMs,
gateways, other templates.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chat.engine.protocol import Finished
from chat.engine.remote import ServerConfig, connect
from chat.engine.remote.engine import RemoteEngine
from chat.engine.remote.vllm import VllmEngine
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import SHORTER, STORY, answered, as_text, run_reply
from tests.servers import VLLM_BLOCK_TOKENS, vllm_server

pytestmark = pytest.mark.model

NEW_AND_TEMPLATE = 20
"""Tokens of a new short message and the template's tokens around it."""
TURN_MOST = NEW_AND_TEMPLATE + VLLM_BLOCK_TOKENS - 1
"""What a turn may evaluate when the cache holds every earlier token: the
new message, the template's tokens, and the part of the last block that the
prefix cache cannot keep (it keeps whole blocks)."""
GREEDY = SamplingSettings(temperature=0, max_tokens=8)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteEngine]:
    with vllm_server(tmp_path_factory.mktemp("vllm")) as url:
        connected = connect(ServerConfig(url=url))  # kind "auto": asked of the server
        try:
            yield connected
        finally:
            connected.close()


def held(earlier: Finished) -> int:
    """What vLLM's prefix cache holds of a conversation after `earlier`, the
    reply to its last prompt: every whole block of that prompt and of the
    reply as sampled, but for the reply's last token (sampled, never
    evaluated)."""
    assert earlier.token_ids is not None
    evaluated = earlier.stats.prompt_tokens + len(earlier.token_ids) - 1
    return evaluated // VLLM_BLOCK_TOKENS * VLLM_BLOCK_TOKENS


def a_story_reply(engine: RemoteEngine) -> tuple[Finished, bool]:
    """A story reply, and whether its text tokenizes otherwise than it was
    sampled (a `\\n\\n` sampled as one token, say): the first of a few seeds
    that gives one, else the first seed's. Whether any does depends on the
    tokenizer vLLM runs with (transformers' conversion of the GGUF's): seed 1
    did with the install of 2026-12-04; with the one `.ci/vllm` made on
    2026-12-05 (transformers 5.19) none of 32 replies did (stories and the
    benchmark's follow-ups, several seeds each)."""
    replies = []
    for seed in range(1, 5):
        sampling = SamplingSettings(temperature=0.8, seed=seed, max_tokens=250)
        _, reply = run_reply(engine, STORY, sampling)
        second_turn = [*answered(STORY, reply), SHORTER]
        if engine.tokenize_chat(second_turn) != engine.tokenize_chat(as_text(second_turn)):
            return reply, True
        replies.append(reply)
    return replies[0], False


def test_it_is_known_for_vllm_and_counts_exactly(engine: RemoteEngine) -> None:
    assert isinstance(engine, VllmEngine)
    assert engine.info.n_ctx == 2048
    prompt = [{"role": "user", "content": "Name three colours."}]
    _, reply = run_reply(engine, prompt, GREEDY)
    # The count the meter shows is the prompt vLLM evaluated.
    assert reply.stats.prompt_tokens == len(engine.tokenize_chat(prompt))
    assert reply.token_ids and len(reply.token_ids) == reply.stats.generated_tokens


def test_turn_two_evaluates_the_new_message_and_no_reply_again(engine: RemoteEngine) -> None:
    first, tokenizes_otherwise = a_story_reply(engine)
    second_turn = [*answered(STORY, first), SHORTER]
    sent = engine.tokenize_chat(second_turn)
    _, second = run_reply(engine, second_turn, GREEDY)
    # vLLM's own figures: the prompt it evaluated is the one counted, and its
    # prefix cache held the first prompt and the reply as sampled.
    assert second.stats.prompt_tokens == len(sent)
    assert second.stats.prompt_evaluated <= len(sent) - held(first), second.stats
    assert second.stats.prompt_evaluated <= TURN_MOST, second.stats
    # What a client that sends the reply as text costs on the same server and
    # cache: the match ends where the reply first tokenizes otherwise; where it
    # tokenizes back as sampled, that client loses nothing either.
    _, as_text_second = run_reply(engine, as_text(second_turn), GREEDY)
    if tokenizes_otherwise:
        assert as_text_second.stats.prompt_evaluated > second.stats.prompt_evaluated
        assert as_text_second.stats.prompt_evaluated > TURN_MOST, as_text_second.stats
    else:
        assert as_text_second.stats.prompt_evaluated <= TURN_MOST, as_text_second.stats


def test_a_conversation_reads_no_reply_twice(engine: RemoteEngine) -> None:
    """Each turn evaluates only what the prefix cache cannot hold: measured
    here over 20 turns (1,200 reply tokens, a 1,570-token prompt at the end),
    23 to 49 tokens a turn, each exactly the new message and the template's
    tokens after the last whole block of what came before."""
    messages: list[dict[str, Any]] = []
    earlier: Finished | None = None
    for turn in range(6):
        messages.append({"role": "user", "content": f"Tell me fact number {turn + 1} about owls."})
        sampling = SamplingSettings(temperature=0.8, seed=turn + 6, max_tokens=60)
        _, reply = run_reply(engine, messages, sampling)
        prompt = reply.stats.prompt_tokens
        assert prompt == len(engine.tokenize_chat(messages))
        if earlier is not None:
            assert reply.stats.prompt_evaluated <= prompt - held(earlier), (turn, reply.stats)
            assert reply.stats.prompt_evaluated <= TURN_MOST, (turn, reply.stats)
        messages, earlier = answered(messages, reply), reply
