"""Thinking on or off from the palette, with the real engine (issue 29 point
4): the demo model under Qwen3's template (a copy of its GGUF), whose switch
`enable_thinking` closes an empty block in the generation prompt. The meter
counts the prompt as it is then rendered, exactly."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Static

from chat.engine.reasoning.markers import THINK, Reasoning
from chat.ui.app import ChatApp
from chat.ui.screens.settings import SettingsScreen
from tests.conftest import turn_done, wait_for
from tests.engine.reasoning_models import qwen3_model
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, open_pane, ready, run_command, send
from tests.ui.widgets.test_thinking import thinking_app


@pytest.fixture(scope="module")
def thinking_model(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield qwen3_model(demo_model, tmp_path_factory.mktemp("qwen3"))


@pytest.mark.model
async def test_thinking_off_from_the_palette_is_counted_exactly(thinking_model: Path) -> None:
    app: ChatApp = thinking_app(thinking_model)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        screen = app.chat_screen
        engine = screen.engine
        assert engine is not None
        plan_on = screen.session.plan("Why is the sky blue?")
        await run_command(pilot, "thinking on or off", "Turn thinking on or off")
        await wait_for(lambda: app.notices, pilot)
        assert "Thinking is off for this conversation." in app.notices[-1].message
        assert not screen.settings.sampling.thinking
        assert screen.session.defaults.sampling.thinking
        plan = screen.session.plan("Why is the sky blue?")
        assert plan is not None and plan_on is not None
        # The empty block `<think>\n\n</think>\n\n` the template now writes.
        assert plan.new > plan_on.new
        await send(pilot, "Why is the sky blue?")
        await turn_done(screen, pilot, 2, timeout=120)
        reply = screen.conversation.messages[-1]
        assert not reply.thinking and reply.stats is not None
        assert reply.stats.thinking_tokens == 0
        # What the meter planned is what was sent.
        assert reply.stats.prompt_tokens == plan.system + plan.history + plan.new
        # And back on: the next prompt has no closed block again.
        await run_command(pilot, "thinking on or off", "Turn thinking on or off")
        assert screen.settings.sampling.thinking
        assert engine.info.reasoning is not None and engine.info.reasoning.enabled


def help_of(pane: SettingsScreen, key: str) -> str:
    return str(pane.field(key).query_one(".setting-help", Static).render())


async def test_the_settings_pane_marks_what_the_model_cannot_honour() -> None:
    """A model that does not think: its three thinking settings are marked
    ignored; one whose template has no switch: thinking on/off only."""
    engine = ScriptedEngine()
    app = make_app(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        for key in ("sampling.thinking", "sampling.thinking_budget", "sampling.keep_thinking"):
            assert "Ignored: this model does not think" in help_of(pane, key)
        assert "Ignored" not in help_of(pane, "sampling.temperature")
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        engine.info = replace(engine.info, reasoning=Reasoning(THINK, "template", True))
        pane = await open_pane(app, pilot)
        assert "cannot turn its thinking off" in help_of(pane, "sampling.thinking")
        assert "Ignored" not in help_of(pane, "sampling.thinking_budget")
