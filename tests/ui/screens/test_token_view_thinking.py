"""The token view of a reasoning model's reply (issue 29 point 6): the
thinking's tokens are tokens too, shown and marked as thinking; the answer's
spell the reply's text. Scripted engine (its model thinks with `<think>`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Static

from chat.engine.reasoning.markers import THINK, Reasoning
from chat.settings.schema import Settings
from chat.ui.screens.token_view import TokenViewScreen
from tests.conftest import turn_done, wait_for
from tests.engine.reasoning_models import THINKING_GRAMMAR, qwen3_model
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send
from tests.ui.widgets.test_thinking import thinking_app

REPLY = ["<think>", "\n", "Plan", " this", "\n</think>", "\n\n", "Sure", "."]


async def test_thinking_tokens_are_shown_and_marked() -> None:
    engine = ScriptedEngine(replies=[REPLY])
    engine.info = replace(engine.info, reasoning=Reasoning(THINK, "template"))
    settings = Settings()
    settings.chat.record_token_probs = True
    app = make_app(engine, settings)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "Why?")
        await turn_done(screen, pilot, 2)
        reply = screen.conversation.messages[-1]
        assert reply.thinking == "Plan this\n" and reply.content == "Sure."
        await pilot.press("ctrl+t")
        await wait_for(lambda: isinstance(app.screen, TokenViewScreen), pilot)
        view = app.screen
        assert isinstance(view, TokenViewScreen)
        assert view.strip.texts == REPLY
        assert view.thinking == [True] * 5 + [False] * 3
        assert view.strip.thinking == view.thinking
        # No warning that the tokens differ from the reply: the answer's spell it.
        assert not view.query("#token-note")
        title = view.query_one("#token-title", Static)
        assert "· thinking" in str(title.render())
        await pilot.press("end")
        await wait_for(lambda: "Token 8 of 8" in str(title.render()), pilot)
        assert "thinking" not in str(title.render())


@pytest.fixture(scope="module")
def thinking_model(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield qwen3_model(demo_model, tmp_path_factory.mktemp("qwen3"))


@pytest.mark.model
async def test_the_real_models_thinking_tokens_are_the_ones_counted(thinking_model: Path) -> None:
    """The demo model under Qwen3's template, made to think by a grammar: the
    token view marks as many tokens as the reply's header counts as thinking."""
    app = thinking_app(thinking_model)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        screen = app.chat_screen
        screen.engine.grammar = THINKING_GRAMMAR  # type: ignore[union-attr]
        await send(pilot, "Why is the sky blue?")
        await turn_done(screen, pilot, 2, timeout=120)
        reply = screen.conversation.messages[-1]
        assert reply.stats is not None and reply.thinking
        await pilot.press("ctrl+t")
        await wait_for(lambda: isinstance(app.screen, TokenViewScreen), pilot)
        view = app.screen
        assert isinstance(view, TokenViewScreen)
        assert len(view.thinking) == reply.stats.generated_tokens
        assert sum(view.thinking) == reply.stats.thinking_tokens
        assert view.thinking[0] and not view.thinking[-1]
        assert not view.query("#token-note")
