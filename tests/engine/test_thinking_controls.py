"""Thinking on or off and a thinking budget (issue 29 point 4), with the real
engine: the demo model under Qwen3's and DeepSeek-R1's templates (copies of
its GGUF, tests/engine/reasoning_models.py). Thinking off goes through the
template's own switch (`enable_thinking`), so the prompt changes and the
engine counts it as it sends it; a budget closes the block after so many
tokens and the model answers, sampled on from the KV cache."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Engine, Finished, TokenEvent
from chat.engine.reasoning.markers import THINK, recognise
from chat.engine.reasoning.splitter import ThinkingSplitter
from chat.engine.remote.llama_server import LlamaServerEngine
from chat.settings.schema import ModelSettings, SamplingSettings
from tests.engine.reasoning_models import (
    DEEPSEEK_R1_TEMPLATE,
    QWEN3_TEMPLATE,
    THINKING_GRAMMAR,
    deepseek_r1_model,
    qwen3_model,
)
from tests.engine.test_reasoning import template

QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]
ANSWER_GRAMMAR = "root ::= [A-Z] [a-z ,.]{4,80}"
"""The answer part of THINKING_GRAMMAR: what follows a block a budget closed."""


def test_the_switch_is_read_from_the_template() -> None:
    qwen3 = recognise(QWEN3_TEMPLATE, template(QWEN3_TEMPLATE))
    r1 = recognise(DEEPSEEK_R1_TEMPLATE, template(DEEPSEEK_R1_TEMPLATE))
    assert qwen3 is not None and qwen3.switch == "enable_thinking" and qwen3.enabled
    assert r1 is not None and r1.switch is None
    off = recognise(QWEN3_TEMPLATE, template(QWEN3_TEMPLATE), enable_thinking=False)
    assert off is not None and not off.enabled and not off.prompt_opens_block
    assert off.options == {"enable_thinking": False} and qwen3.options == {}


@pytest.fixture(scope="module")
def engines(
    demo_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LlamaEngine]]:
    folder = tmp_path_factory.mktemp("thinking-controls")
    log = folder / "llama.log"
    settings = ModelSettings(n_ctx=1024)
    loaded = {
        "qwen3": load_engine(qwen3_model(demo_model, folder), settings, log),
        "r1": load_engine(deepseek_r1_model(demo_model, folder), settings, log),
    }
    yield loaded
    for engine in loaded.values():
        engine.close()


def run(engine: Engine, sampling: SamplingSettings) -> tuple[list[TokenEvent], Finished]:
    """The reply to QUESTION: its token events and its end."""
    events: list[TokenEvent] = []
    finished = None
    for event in engine.stream_reply(QUESTION, sampling, threading.Event()):
        if isinstance(event, TokenEvent):
            events.append(event)
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    return events, finished


@pytest.mark.model
def test_thinking_off_renders_the_templates_closed_block_and_counts_it(
    engines: dict[str, LlamaEngine],
) -> None:
    engine = engines["qwen3"]
    on = engine.tokenize_chat(QUESTION)
    engine.set_thinking(False)
    try:
        reasoning = engine.info.reasoning
        assert reasoning is not None and not reasoning.enabled
        assert not reasoning.prompt_opens_block
        off = engine.tokenize_chat(QUESTION)
        # The generation prompt now ends with an empty, closed block.
        assert bytes(engine.llama.detokenize(off[len(on) :], special=True)).decode() == (
            "<think>\n\n</think>\n\n"
        )
        # What the meter counts is what is sent.
        _, finished = run(engine, SamplingSettings(temperature=0.0, max_tokens=8))
        assert finished.stats.prompt_tokens == len(off)
    finally:
        engine.set_thinking(True)
    assert engine.tokenize_chat(QUESTION) == on
    assert engine.info.reasoning is not None and engine.info.reasoning.enabled


@pytest.mark.model
def test_a_template_without_a_switch_keeps_thinking_on(engines: dict[str, LlamaEngine]) -> None:
    engine = engines["r1"]
    before = engine.tokenize_chat(QUESTION)
    engine.set_thinking(False)
    reasoning = engine.info.reasoning
    assert reasoning is not None and reasoning.enabled and reasoning.prompt_opens_block
    assert engine.tokenize_chat(QUESTION) == before


def budget_reply(
    engine: LlamaEngine | LlamaServerEngine, budget: int, closing: int
) -> tuple[list[TokenEvent], Finished]:
    """The reply to QUESTION under `budget`, thinking under THINKING_GRAMMAR
    and answering under ANSWER_GRAMMAR after the close: its events and its
    end. Checks that it thought up to the budget (`closing`: the closing
    marker's tokens), less than without one, closed the block once, and
    answered."""
    engine.grammar, engine.answer_grammar = THINKING_GRAMMAR, ANSWER_GRAMMAR
    try:
        events, finished = run(
            engine, SamplingSettings(temperature=0.0, max_tokens=120, thinking_budget=budget)
        )
        _, unlimited = run(engine, SamplingSettings(temperature=0.0, max_tokens=120))
    finally:
        engine.grammar = engine.answer_grammar = None
    text = "".join(event.text for event in events)
    assert text == finished.text and text.count(THINK.close) == 1
    splitter = ThinkingSplitter(THINK)
    for event in events:
        splitter.feed(event.text, 1)
    splitter.flush()
    # Thinking stops at the budget (marker tokens count, as the meter counts
    # them); the closing marker's tokens are the reply's too (the blank line
    # after it may count as the answer's), then the answer.
    assert budget < splitter.thinking_tokens <= budget + closing
    assert splitter.answer and splitter.answer[0].isupper()
    assert finished.stats.generated_tokens == len(events)
    assert len(splitter.thinking) < len(unlimited.text.split(THINK.close)[0])
    return events, finished


@pytest.mark.model
@pytest.mark.parametrize("budget", [12, 20])
def test_a_budget_closes_the_thought_and_the_model_answers(
    engines: dict[str, LlamaEngine], budget: int
) -> None:
    engine = engines["qwen3"]
    closing = engine.chat_prompt.tokenize_text(b"\n</think>\n\n", False)
    budget_reply(engine, budget, len(closing))


@pytest.mark.model
def test_a_budget_with_the_block_opened_by_the_prompt(engines: dict[str, LlamaEngine]) -> None:
    """DeepSeek-R1's prompt opens the block: the reply is thinking from its
    first token, and the model (no grammar) answers after the closed block."""
    engine = engines["r1"]
    closing = engine.chat_prompt.tokenize_text(b"\n</think>\n\n", False)
    budget_in_an_opened_block(engine, len(closing))


def budget_in_an_opened_block(engine: Engine, closing: int) -> None:
    """A budget of 6 with the block opened by the prompt (no grammar):
    closed after 6 tokens of thought (`closing`: the closing marker's
    tokens), and the model answers."""
    events, finished = run(
        engine, SamplingSettings(temperature=0.0, max_tokens=40, thinking_budget=6)
    )
    splitter = ThinkingSplitter(THINK, starts_inside=True)
    for event in events:
        splitter.feed(event.text, 1)
    splitter.flush()
    assert 6 < splitter.thinking_tokens <= 6 + closing
    assert not splitter.in_thinking
    assert finished.stats.generated_tokens > 6 + closing


@pytest.mark.model
def test_no_budget_where_thinking_is_off(engines: dict[str, LlamaEngine]) -> None:
    no_budget_with_thinking_off(engines["qwen3"])


def no_budget_with_thinking_off(engine: Engine) -> None:
    engine.set_thinking(False)
    try:
        events, _ = run(engine, SamplingSettings(temperature=0.0, max_tokens=10, thinking_budget=2))
    finally:
        engine.set_thinking(True)
    assert THINK.close not in "".join(event.text for event in events)


@pytest.mark.model
def test_llama_server_turns_thinking_off_as_the_local_engine_does(
    engines: dict[str, LlamaEngine], tmp_path: Path
) -> None:
    """kvchat's llama-server engine asks `/apply-template` for the same prompt
    (`chat_template_kwargs`): the server's tokens are the local engine's."""
    from chat.engine.remote import ServerConfig, connect
    from tests.servers import llama_server

    local = engines["qwen3"]
    with llama_server(tmp_path, ["--jinja"], n_ctx=1024, model=local.info.path) as server:
        remote = connect(ServerConfig(url=server.url, kind="llama-server"))
        try:
            assert "thinking" not in remote.ignored_settings  # type: ignore[attr-defined]
            on = remote.tokenize_chat(QUESTION)
            remote.set_thinking(False)
            reasoning = remote.info.reasoning
            assert reasoning is not None and not reasoning.enabled
            off = remote.tokenize_chat(QUESTION)
        finally:
            remote.close()
    assert on == local.tokenize_chat(QUESTION)
    local.set_thinking(False)
    try:
        assert off == local.tokenize_chat(QUESTION) and off != on
    finally:
        local.set_thinking(True)
