"""The app with every layer on the device, as a user drives it: the status bar
names the device and the layers; a reply streams, with the context meter, the
prompt's progress and the token view; Esc stops a reply and Ctrl+L continues
it; the settings pane moves the model between the device and the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.settings import SettingsScreen
from chat.ui.screens.token_view import TokenViewScreen
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.status_bar import StatusBar
from chat.ui.widgets.token_strip import TokenStrip
from tests.conftest import turn_done, wait_for
from tests.ui.conftest import reply_on_screen, send

SLOW = 300.0
"""Seconds a step may take: llvmpipe decodes a few tokens a second."""


def device_app(demo_model: Path, **model: object) -> ChatApp:
    settings = Settings()
    settings.model.n_ctx = 1024
    # Thread counts given: no measuring them at the first load, which on
    # llvmpipe decodes slowly (tests/engine/test_threads.py measures).
    settings.model.n_threads = settings.model.n_threads_batch = 2
    for key, value in model.items():
        setattr(settings.model, key, value)
    settings.chat.system_prompt = "Be brief."
    settings.chat.prefill = False  # nothing evaluated ahead: each step waits less
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 5
    return ChatApp(Launch(settings, ModelCandidate(demo_model, demo_model.stat().st_size, "demo")))


def status(app: ChatApp) -> str:
    return app.query_one(StatusBar).full_text()


def progress(app: ChatApp) -> str:
    return str(app.query_one("#status", Static).render())


@pytest.mark.model
async def test_a_reply_on_the_device(demo_model: Path, device_name: str) -> None:
    # Batches of 16 prompt tokens: the prompt's progress shows between them.
    app = device_app(demo_model, n_batch=16)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=SLOW)
        layers = screen.engine.info.n_layers + 1  # type: ignore[union-attr]
        await wait_for(lambda: f"GPU: {layers}/{layers} layers" in status(app), pilot)
        assert f"GPU: {layers}/{layers} layers · {device_name}" in status(app)

        await send(pilot, "Say hi to the people of the world.")
        # Read a batch at a time: llvmpipe takes seconds over each.
        await wait_for(lambda: "Reading prompt" in progress(app), pilot, timeout=SLOW)
        await turn_done(screen, pilot, 2, timeout=SLOW)
        first = screen.conversation.messages[-1]
        assert first.content and first.content in reply_on_screen(app)
        assert first.stats is not None and first.stats.generated_tokens > 0
        meter = app.query_one(ContextMeter)
        assert meter.state is not None and meter.state.used >= first.stats.prompt_tokens

        # The token view: the reply, token by token, with its probabilities.
        await pilot.press("ctrl+t")
        await wait_for(lambda: isinstance(app.screen, TokenViewScreen), pilot)
        await pilot.pause()
        assert "".join(app.screen.query_one(TokenStrip).texts) == first.content
        await pilot.press("escape")
        await wait_for(lambda: app.screen is screen, pilot)

        # Esc mid-reply, then Ctrl+L goes on in the same message.
        app.settings.sampling.max_tokens = 30
        await send(pilot, "Count to ten.")
        await wait_for(
            lambda: len(app.query(AssistantMessageView)) == 2 and len(reply_on_screen(app)) >= 2,
            pilot,
            timeout=SLOW,
        )
        await pilot.press("escape")
        await turn_done(screen, pilot, 4, timeout=SLOW)
        cut = screen.conversation.messages[-1]
        assert cut.stats is not None and cut.stats.finish_reason == "stopped"
        before = cut.content
        app.settings.sampling.max_tokens = 2
        await pilot.press("ctrl+l")
        await wait_for(
            lambda: len(cut.content) > len(before) and not screen.generating,
            pilot,
            timeout=SLOW,
        )
        assert screen.conversation.messages[-1] is cut and len(screen.conversation.messages) == 4
        assert cut.content.startswith(before)
        await pilot.press("ctrl+q")


@pytest.mark.model
async def test_the_settings_pane_moves_the_model_to_the_cpu_and_back(
    demo_model: Path, device_name: str
) -> None:
    app = device_app(demo_model)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=SLOW)
        await wait_for(lambda: device_name in status(app), pilot)
        for layers, shown in (("0", "CPU only (GPU layers set to 0)"), ("-1", device_name)):
            engine = screen.engine
            await pilot.press("f2")
            await wait_for(lambda: isinstance(app.screen, SettingsScreen), pilot)
            await pilot.pause()
            pane = app.screen
            assert isinstance(pane, SettingsScreen)
            pane.field("model.n_gpu_layers").control.value = layers  # type: ignore[attr-defined]
            await pilot.pause()
            await pilot.click("#save")
            await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
            await wait_for(
                lambda e=engine: screen.engine is not None and screen.engine is not e,
                pilot,
                timeout=SLOW,
            )
            await wait_for(lambda s=shown: s in status(app), pilot)
            count = len(screen.conversation.messages)
            app.settings.sampling.max_tokens = 2
            await send(pilot, "Hi")
            await turn_done(screen, pilot, count + 2, timeout=SLOW)
            assert screen.conversation.messages[-1].content
        assert not [n for n in app.notices if n.severity == "error"]
        await pilot.press("ctrl+q")
