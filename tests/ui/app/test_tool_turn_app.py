"""A turn with tools in the whole app, with real parts (issue 30 points 2,
3, 5): the demo model behind Qwen 2.5's tool-calling template, its first
reply made to open a call (kvchat's own grammar writes the call), and the
tests' SDK-written MCP server started by the app from its config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chat.engine.llama import load_engine
from chat.models.files import ModelCandidate
from chat.settings.schema import ModelSettings, Settings
from chat.tools.status import ServerState
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.tool_permission import ToolPermissionScreen
from chat.ui.widgets.tool_call_block import ToolCallBlock, ToolSteps
from tests.conftest import turn_done, wait_for
from tests.engine.tool_models import OPENS_HERMES_CALL, qwen25_model
from tests.session.test_tool_turn import StepGrammars
from tests.tools.conftest import sdk_server
from tests.ui.conftest import on_top, send


async def test_the_real_model_asks_calls_the_real_server_and_answers(
    demo_model: Path, tmp_path: Path
) -> None:
    model = qwen25_model(demo_model, tmp_path)
    settings = Settings()
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 80
    settings.sampling.seed = 1
    settings.chat.prefill = False
    settings.chat.system_prompt = ""

    def factory(path: Path, model_settings: ModelSettings) -> Any:
        engine = load_engine(path, ModelSettings(n_ctx=4096), tmp_path / "logs")
        return StepGrammars(engine, [OPENS_HERMES_CALL])

    launch = Launch(
        settings, ModelCandidate(model, model.stat().st_size, "test"), tool_servers=(sdk_server(),)
    )
    app = ChatApp(launch, engine_factory=factory)
    async with app.run_test(size=(100, 30)) as pilot:
        servers = app.tool_servers
        await wait_for(lambda: servers.servers["sdk"].state is ServerState.READY, pilot, timeout=60)
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=60)
        tools = app.turn.tools
        assert tools is not None and tools.on  # on: a server is configured
        tools.tools_off |= {("sdk", name) for name in ("environment", "big", "wait", "crash")}
        await send(pilot, "Please echo hello.")
        dialog = await on_top(pilot, ToolPermissionScreen)
        assert "Tool: echo" in "\n".join(str(w.render()) for w in dialog.query("Static"))
        await pilot.press("o")
        await turn_done(app.chat_screen, pilot, 2, timeout=120)
        (block,) = app.query(ToolCallBlock)
        assert block.state == "ran" and block.record is not None
        assert block.record.result == block.request.arguments["text"]
        figures = [str(w.render()) for w in app.query_one(ToolSteps).query(".tool-step-figures")]
        assert len(figures) == 1 and figures[0].startswith("Step 1 · sent ")
        reply = app.chat_screen.conversation.messages[-1]
        assert reply.role == "assistant" and reply.content
        assert reply.stats is not None and reply.stats.prompt_reused > 0
        await pilot.press("ctrl+q")
