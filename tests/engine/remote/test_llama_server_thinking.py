"""A thinking budget and earlier thinking kept, on llama-server (issue 29
point 4 and 5): kvchat does both itself, as for a local model, since it
samples from `/completion` with a prompt of token ids. With the demo model
under Qwen3's and DeepSeek-R1's templates (copies of its GGUF,
tests/engine/reasoning_models.py), llama-server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.remote import ServerConfig, connect
from chat.engine.remote.llama_server import LlamaServerEngine
from chat.session.turn import TurnEnded
from tests.engine.reasoning_models import THINKING_GRAMMAR, deepseek_r1_model, qwen3_model
from tests.engine.test_thinking_controls import (
    QUESTION,
    budget_in_an_opened_block,
    budget_reply,
    no_budget_with_thinking_off,
)
from tests.servers import llama_server
from tests.session.test_thinking_continue import goes_on_inside_the_thought
from tests.session.test_thinking_reuse import settings
from tests.session.test_turn import Recorded

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def served(
    demo_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LlamaServerEngine]]:
    """kvchat's engine on a llama-server for each template copy."""
    folder = tmp_path_factory.mktemp("server-thinking")
    models = {"qwen3": qwen3_model(demo_model, folder), "r1": deepseek_r1_model(demo_model, folder)}
    with (
        llama_server(folder, ["--jinja"], n_ctx=2048, model=models["qwen3"]) as qwen3,
        llama_server(folder, ["--jinja"], n_ctx=2048, model=models["r1"]) as r1,
    ):
        engines = {}
        for name, server in (("qwen3", qwen3), ("r1", r1)):
            engine = connect(ServerConfig(url=server.url, kind="llama-server"))
            assert isinstance(engine, LlamaServerEngine)
            engines[name] = engine
        yield engines
        for engine in engines.values():
            engine.close()


def closing_tokens(engine: LlamaServerEngine) -> int:
    return len(engine._text_pieces("\n</think>\n\n", False))


def test_the_budget_is_honoured_and_so_marked(served: dict[str, LlamaServerEngine]) -> None:
    for engine in served.values():
        assert not {"thinking_budget", "keep_thinking"} & engine.ignored_settings


@pytest.mark.parametrize("budget", [12, 20])
def test_a_budget_closes_the_thought_and_the_model_answers(
    served: dict[str, LlamaServerEngine], budget: int
) -> None:
    engine = served["qwen3"]
    # Closed by kvchat with the template's marker, answered.
    events, finished = budget_reply(engine, budget, closing_tokens(engine))
    # The prompt's figures are the first request's: the whole prompt, once.
    prompt = engine.tokenize_chat(QUESTION)
    assert finished.stats.prompt_tokens == len(prompt)
    # The ids spell the reply as it was written (closing marker included).
    assert finished.token_ids is not None and len(finished.token_ids) == len(events)


def test_a_budget_with_the_block_opened_by_the_prompt(
    served: dict[str, LlamaServerEngine],
) -> None:
    """DeepSeek-R1's prompt opens the block: thinking from the first token;
    the model (no grammar) answers after the block kvchat closed."""
    engine = served["r1"]
    reasoning = engine.info.reasoning
    assert reasoning is not None and reasoning.prompt_opens_block
    budget_in_an_opened_block(engine, closing_tokens(engine))


def test_no_budget_where_thinking_is_off(served: dict[str, LlamaServerEngine]) -> None:
    no_budget_with_thinking_off(served["qwen3"])


async def test_earlier_thinking_kept_goes_back_as_sampled_and_is_counted_exactly(
    served: dict[str, LlamaServerEngine],
) -> None:
    """With `keep_thinking`, a reply that thought goes back to the server
    whole, as its sampled ids: the slot's cache holds it, so the next turn
    evaluates the new message and the template's tokens only; the meter
    counts that prompt exactly."""
    engine = served["qwen3"]
    recorded = Recorded(engine, settings=settings(keep_thinking=True))
    turn = recorded.turn
    engine.grammar = THINKING_GRAMMAR
    try:
        reply = await recorded.reply_to("Why is the sky blue?")
        assert reply.thinking and reply.content and reply.token_ids
        first = engine.tokenize_chat(QUESTION)
        session = turn.session
        plan = session.plan("And at sunset?")
        prompt = session.prefill_prompt("And at sunset?")
        assert plan is not None and prompt is not None
        tokens = engine.tokenize_chat(*prompt)
        assert tokens[: len(first) + len(reply.token_ids)] == [*first, *reply.token_ids]
        assert plan.used == len(tokens)
        assert turn.send("And at sunset?") is None
        await asyncio.wait_for(turn.stopped(), 120)
    finally:
        engine.grammar = None
    second = recorded.of(TurnEnded)[-1].reply
    assert second.stats is not None and second.stats.prompt_tokens == len(tokens)
    # The server's own figures: the least possible, the new message and the
    # template's tokens (and the reply's last token, never evaluated).
    least = len(tokens) - len(first) - len(reply.token_ids)
    assert least <= second.stats.prompt_evaluated <= least + 1, second.stats


async def test_a_reply_cut_mid_thought_goes_on_inside_it(
    served: dict[str, LlamaServerEngine],
) -> None:
    """Continuing on llama-server: the prompt the reply was sampled from, then
    the reply as its sampled ids (markers and thinking), which the slot's
    cache holds: the server evaluates next to nothing, and the model thinks
    on, closes the block and answers."""
    engine = served["qwen3"]
    chosen = settings()
    chosen.sampling.max_tokens = 14  # cut inside the thought
    recorded = Recorded(engine, settings=chosen)
    engine.grammar = THINKING_GRAMMAR
    try:
        reply = await recorded.reply_to("Why is the sky blue?")
        assert reply.thinking and not reply.content and reply.token_ids
    finally:
        engine.grammar = None
    sampled = len(reply.token_ids or ())
    stats = await goes_on_inside_the_thought(engine, recorded, chosen)
    prompt = engine.tokenize_chat(QUESTION)
    assert stats.prompt_tokens == len(prompt) + sampled
    assert stats.prompt_evaluated <= 2, stats  # the server's own figure
