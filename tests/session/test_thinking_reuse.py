"""The turn after a thinking reply (issue 29 point 5), with the real engine:
the demo model under Qwen3's template (a copy of its GGUF) made to think by a
grammar (tests/engine/reasoning_models.py).

The template drops the earlier thinking, so the next prompt leaves the KV
cache where the thinking began: the next turn evaluates the previous answer
again, the new message and the template's tokens, and no more. A prefill
while typing evaluates exactly that ahead, and the reply then evaluates
nothing. With `keep_thinking` the reply goes in as it was sampled: only the
new message is evaluated, and the meter counts that prompt exactly."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.kv_state import common_prefix
from chat.engine.llama import LlamaEngine, load_engine
from chat.session.turn import TurnEnded
from chat.settings.schema import ModelSettings, Settings
from tests.engine.reasoning_models import THINKING_GRAMMAR, qwen3_model
from tests.session.test_turn import Recorded

pytestmark = pytest.mark.model

NEXT = "And at sunset?"


@pytest.fixture(scope="module")
def engine(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaEngine]:
    folder = tmp_path_factory.mktemp("thinking-reuse")
    loaded = load_engine(qwen3_model(demo_model, folder), ModelSettings(n_ctx=2048), folder / "log")
    loaded.grammar = THINKING_GRAMMAR
    yield loaded
    loaded.close()


def settings(keep_thinking: bool = False) -> Settings:
    chosen = Settings()
    chosen.chat.system_prompt = ""
    chosen.chat.prefill = False  # the tests below prefill when they mean to
    chosen.sampling.temperature = 0.0
    chosen.sampling.max_tokens = 120
    chosen.sampling.keep_thinking = keep_thinking
    return chosen


async def thinking_turn(engine: LlamaEngine, recorded: Recorded) -> tuple[list[int], list[int]]:
    """One reply that thinks; the prompt it was sent and the tokens it sampled."""
    engine.reset()
    turn = recorded.turn
    assert turn.send("Why is the sky blue?") is None
    await asyncio.wait_for(turn.stopped(), 120)
    await turn.rebatched()  # as a user reading it: a repeatable reply is batched again first
    (ended,) = recorded.of(TurnEnded)
    reply = ended.reply
    assert reply.thinking and reply.content and reply.token_ids
    question = turn.session.conversation.messages[:1]
    first = engine.tokenize_chat([m.as_chat_dict() for m in question])
    return first, list(reply.token_ids)


def least_possible(first: list[int], sampled: list[int], prompt: list[int]) -> int:
    """What the next prompt must evaluate when the KV cache holds the first
    prompt and the reply as sampled: all of it after their common prefix."""
    return len(prompt) - common_prefix([*first, *sampled], prompt)


async def test_the_turn_after_thinking_evaluates_the_answer_again_and_no_more(
    engine: LlamaEngine,
) -> None:
    recorded = Recorded(engine, settings=settings())
    first, sampled = await thinking_turn(engine, recorded)
    turn = recorded.turn
    reply = turn.session.conversation.messages[-1]
    prompt = turn.session.prefill_prompt(NEXT)
    assert prompt is not None
    tokens = engine.tokenize_chat(*prompt)
    least = least_possible(first, sampled, tokens)
    # The dropped thinking is where the prompt leaves the cache: the answer
    # (tokenized again), its end and the new message come after it.
    answer = engine.chat_prompt.tokenize_text(reply.content.encode(), False)
    assert len(answer) < least < len(answer) + 30
    assert common_prefix(tokens, first) == len(first)
    assert turn.send(NEXT) is None
    await asyncio.wait_for(turn.stopped(), 120)
    second = recorded.of(TurnEnded)[-1].reply
    assert second.stats is not None
    assert second.stats.prompt_tokens == len(tokens)
    assert second.stats.prompt_evaluated == least
    assert second.stats.prompt_reused == len(tokens) - least


async def test_a_prefill_after_thinking_evaluates_the_next_prompt_ahead(
    engine: LlamaEngine,
) -> None:
    chosen = settings()
    chosen.chat.prefill = True
    recorded = Recorded(engine, settings=chosen)
    await thinking_turn(engine, recorded)
    turn = recorded.turn
    turn.typed = lambda: NEXT
    prompt = turn.session.prefill_prompt(NEXT)
    assert prompt is not None
    tokens = engine.tokenize_chat(*prompt)
    # A pause in typing while the reply is evaluated again in the background
    # (temperature 0: `rebatch_reply`) prefills once that is done.
    turn.prefill_now()
    await recorded.until(lambda: engine.cached_prefix(tokens) >= len(tokens) - 1, 60)
    assert turn.send(NEXT) is None
    await asyncio.wait_for(turn.stopped(), 120)
    second = recorded.of(TurnEnded)[-1].reply
    assert second.stats is not None and second.stats.prompt_tokens == len(tokens)
    assert second.stats.prompt_evaluated <= 2, second.stats


async def test_keeping_earlier_thinking_evaluates_only_the_new_message(
    engine: LlamaEngine,
) -> None:
    recorded = Recorded(engine, settings=settings(keep_thinking=True))
    first, sampled = await thinking_turn(engine, recorded)
    turn = recorded.turn
    plan = turn.session.plan(NEXT)
    prompt = turn.session.prefill_prompt(NEXT)
    assert plan is not None and prompt is not None
    tokens = engine.tokenize_chat(*prompt)
    # The reply goes in whole, as sampled: thinking and all.
    assert tokens[: len(first) + len(sampled)] == [*first, *sampled]
    # The meter counts that prompt exactly.
    assert plan.system + plan.history + plan.new == len(tokens)
    least = least_possible(first, sampled, tokens)
    assert least == len(tokens) - len(first) - len(sampled)
    assert turn.send(NEXT) is None
    await asyncio.wait_for(turn.stopped(), 120)
    second = recorded.of(TurnEnded)[-1].reply
    assert second.stats is not None and second.stats.prompt_tokens == len(tokens)
    # The last sampled token was never evaluated (sampling stopped after it).
    assert second.stats.prompt_evaluated <= least + 1, second.stats


ANSWER_GRAMMAR = "root ::= [A-Z] [a-z ,.]{30,80}"
"""A reply without thinking (thinking off)."""


@pytest.mark.parametrize("thinks", [True, False], ids=["cut-mid-thought", "thinking-off"])
async def test_a_continuation_keeps_the_earlier_thinking_it_was_sent_with(
    engine: LlamaEngine, thinks: bool
) -> None:
    """With `keep_thinking`, a continuation's prompt holds the earlier replies
    as the cut reply's own prompt did, thinking included: the KV cache holds
    all of it, and going on evaluates only the last token sampled. (A
    random seed: a repeatable reply is evaluated again in batches meanwhile.)"""
    chosen = settings(keep_thinking=True)
    chosen.sampling.temperature = 0.7
    recorded = Recorded(engine, settings=chosen)
    await thinking_turn(engine, recorded)
    turn = recorded.turn
    session = turn.session
    session.change_sampling(max_tokens=14 if thinks else 6, thinking=thinks)
    engine.grammar = THINKING_GRAMMAR if thinks else ANSWER_GRAMMAR
    try:
        assert turn.send(NEXT) is None
        await asyncio.wait_for(turn.stopped(), 120)
        cut = recorded.of(TurnEnded)[-1].reply
        assert cut.stats is not None and cut.stats.finish_reason == "max_tokens"
        assert bool(cut.thinking) == thinks and cut.token_ids
        plan = session.plan(None)
        assert plan is not None
        sent = engine.chat_prompt.tokens(session.reply_prompt(plan, True), False, open_last=True)
        # The cut reply's prompt (the earlier reply whole), then the cut reply.
        earlier = session.conversation.messages[1]
        assert earlier.thinking and earlier.token_ids
        assert contains(sent, earlier.token_ids)
        cached = engine.cached_prefix(sent)
        assert len(sent) - cached <= 1
        session.change_sampling(max_tokens=20)
        assert turn.continue_reply() is None
        await asyncio.wait_for(turn.stopped(), 120)
    finally:
        engine.grammar = THINKING_GRAMMAR
        engine.set_thinking(True)
    ended = recorded.of(TurnEnded)[-1]
    assert ended.continued
    stats = ended.reply.stats
    assert stats is not None and stats.prompt_tokens == len(sent)
    assert stats.prompt_evaluated == len(sent) - cached


def contains(tokens: list[int], run: list[int]) -> bool:
    """Whether `run` occurs in `tokens`, in one piece."""
    return any(tokens[i : i + len(run)] == run for i in range(len(tokens) - len(run) + 1))
