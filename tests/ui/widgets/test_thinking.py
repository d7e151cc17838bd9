"""A reasoning model's thinking in the app (issue 29): recognised from the
model's template, streamed into a folded block apart from the answer, kept
apart in the conversation, and not sent again where the template drops it.

No reasoning model can be downloaded here: the demo model plays one, with
Qwen3's chat template written into a copy of its GGUF and a grammar that makes
its own tokens think, then answer (tests/engine/reasoning_models.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.reasoning.markers import THINK
from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.message_view import NO_ANSWER, AssistantMessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.thinking_block import ThinkingBlock
from tests.conftest import turn_done, wait_for
from tests.engine.reasoning_models import THINKING_GRAMMAR, qwen3_model


@pytest.fixture(scope="module")
def thinking_model(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield qwen3_model(demo_model, tmp_path_factory.mktemp("qwen3"))


def thinking_app(model: Path) -> ChatApp:
    settings = Settings()
    settings.model.n_ctx = 2048
    settings.sampling.max_tokens = 200
    settings.sampling.temperature = 0.0
    settings.chat.system_prompt = ""
    return ChatApp(Launch(settings, ModelCandidate(model, model.stat().st_size, "test")))


def block_text(app: ChatApp) -> str:
    blocks = list(app.query(ThinkingBlock))
    return str(blocks[-1].render()) if blocks else ""


@pytest.mark.model
async def test_a_reasoning_reply_thinks_in_a_folded_block_then_answers(
    thinking_model: Path,
) -> None:
    app = thinking_app(thinking_model)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        screen = app.chat_screen
        engine = screen.engine
        # Recognised from the template and the vocabulary, not from a name.
        assert engine is not None and engine.info.reasoning is not None
        assert engine.info.reasoning.markers == THINK
        engine.grammar = THINKING_GRAMMAR  # type: ignore[attr-defined]
        box = app.query_one(PromptBox)
        box.focus()
        box.insert("Why is the sky blue?")
        await pilot.press("enter")
        await turn_done(screen, pilot, 2, timeout=120)
        reply = screen.conversation.messages[-1]
        # The answer alone is the reply's text; the thinking is kept beside it.
        assert reply.thinking and reply.content
        assert "<think>" not in reply.content and "</think>" not in reply.content
        assert "think>" not in reply.thinking
        assert reply.content[0].isupper()
        stats = reply.stats
        assert stats is not None
        assert 0 < stats.thinking_tokens < stats.generated_tokens
        assert stats.first_answer_s is not None and stats.first_answer_s >= stats.ttft_s
        # Folded: one line with its token count; the answer below it.
        view = list(app.query(AssistantMessageView))[-1]
        summary = block_text(app)
        assert summary.startswith("▸ Thinking · ") and f"{stats.thinking_tokens} token" in summary
        assert reply.thinking not in summary
        assert view.body.source == reply.content
        assert "first answer" in view.header_text().plain
        # alt+t unfolds it (the whole thought shown), and folds it again.
        await pilot.press("alt+t")
        await wait_for(lambda: reply.thinking[:30] in block_text(app), pilot)
        assert block_text(app).startswith("▾ Thinking")
        await pilot.press("alt+t")
        await wait_for(lambda: block_text(app).startswith("▸"), pilot)
        # The next turn: Qwen3's template drops the earlier thinking, and the
        # meter counts exactly what it renders (the plan is the engine's count).
        plan = screen.session.plan("And the sunset?")
        next_prompt = screen.session.prefill_prompt("And the sunset?")
        assert plan is not None and next_prompt is not None
        prompt = next_prompt[0]
        rendered = engine.tokenize_chat(prompt, True)
        assert plan.system + plan.history + plan.new == len(rendered)
        text = engine.chat_prompt.formatters[True].render(prompt)  # type: ignore[attr-defined]
        assert reply.thinking.strip()[:20] not in text
        assert reply.content[:20] in text


@pytest.mark.model
async def test_a_reply_that_ends_inside_its_thinking_says_it_gave_no_answer(
    thinking_model: Path,
) -> None:
    # Folded, the thinking alone looked like a reply that broke: nothing
    # said the model ended its turn before answering (an R1 distill does).
    app = thinking_app(thinking_model)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        engine = screen.engine
        engine.grammar = 'root ::= "<think>\\n" [a-z ,.]{5,40}'  # type: ignore[attr-defined]
        box = app.query_one(PromptBox)
        box.insert("What is 2+2?")
        await pilot.press("enter")
        await turn_done(screen, pilot, 2, timeout=120)
        reply = screen.conversation.messages[-1]
        assert reply.thinking and not reply.content.strip()
        assert reply.stats is not None and reply.stats.finish_reason == "done"
        view = list(app.query(AssistantMessageView))[-1]
        assert NO_ANSWER in view.header_text().plain
