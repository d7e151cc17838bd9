"""A model whose chat template fails, in the real app with the real engine:
the app stays up, names the fault, and offers plain ChatML; only once the user
agrees is the model loaded again with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chat.models.files import ModelCandidate
from chat.runtime.model_loader import LoadState
from chat.settings.schema import ModelSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.dialogs import ConfirmScreen
from tests.conftest import wait_for
from tests.engine.template_models import with_chat_template

FAILING = "{{ raise_exception('This template only takes tool calls') }}"


def _app(model: Path) -> ChatApp:
    settings = Settings(model=ModelSettings(n_ctx=512))
    return ChatApp(Launch(settings, ModelCandidate(model, model.stat().st_size, "fails")))


def _dialog_shown(app: ChatApp) -> Callable[[], bool]:
    """The dialog is on screen with its buttons (a screen is active before it
    is composed)."""
    return lambda: isinstance(app.screen, ConfirmScreen) and bool(app.screen.query("#yes"))


def _dialog_text(app: ChatApp) -> str:
    return str(app.screen.query_one(".dialog-text").render())


async def test_a_failing_template_is_named_and_plain_chatml_offered(
    demo_model: Path, tmp_path: Path
) -> None:
    model = with_chat_template(demo_model, tmp_path / "fails.gguf", FAILING)
    app = _app(model)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(_dialog_shown(app), pilot, timeout=60)
        assert app.models.state is LoadState.FAILED
        text = _dialog_text(app)
        assert text.startswith(
            "The chat template of fails.gguf failed: This template only takes tool calls."
        )
        assert "plain ChatML" in text
        await pilot.press("enter")  # the focused "Use plain ChatML"
        await wait_for(lambda: app.models.state is LoadState.READY, pilot, timeout=60)
        engine = app.models.engine
        assert engine is not None
        tokens = engine.tokenize_chat([{"role": "user", "content": "Hi"}])
        assert len(tokens) > 0
        # For this run only: nothing was written to the settings.
        assert app.settings.model.plain_template is False


async def test_declining_leaves_the_model_unloaded(demo_model: Path, tmp_path: Path) -> None:
    model = with_chat_template(demo_model, tmp_path / "fails.gguf", FAILING)
    app = _app(model)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(_dialog_shown(app), pilot, timeout=60)
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, ConfirmScreen), pilot)
        assert app.models.state is LoadState.FAILED and app.models.engine is None
