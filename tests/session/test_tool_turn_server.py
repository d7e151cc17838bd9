"""A turn with tools over a real llama-server (built by .ci/llama-server,
`--jinja`) on loopback: the demo model behind Qwen 2.5's template calls the
bench's MCP echo server through the server's API (its first reply with
`tool_choice` "required", as in tests/engine/remote/test_llama_server_tools.py),
the user is asked, the call runs, and the reply is kept with its step."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.bench.tools import bench_server
from chat.engine.remote.engine import RemoteEngine
from chat.session.tool_loop import ToolLoopSettings
from chat.session.tool_turn import ConversationTools, ToolCallEnded, ToolStepEnded
from chat.session.turn import TurnEnded
from chat.settings.schema import Settings
from chat.tools.permissions import Choice, Permissions
from tests.engine.remote.conftest import connect_to
from tests.engine.tool_models import qwen25_model
from tests.servers import llama_server
from tests.session.test_tool_turn import Answers
from tests.session.test_turn import Recorded
from tests.tools.conftest import running

pytestmark = pytest.mark.model


class ChoicePerStep:
    """The server's engine, its first reply made to call ("required")."""

    def __init__(self, engine: RemoteEngine, choices: list[str]) -> None:
        self._engine = engine
        self.choices = list(choices)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def stream_reply(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._engine.tool_choice = self.choices.pop(0) if self.choices else "auto"
        yield from self._engine.stream_reply(*args, **kwargs)


@pytest.fixture(scope="module")
def engine(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteEngine]:
    folder = tmp_path_factory.mktemp("tool-turn-server")
    model = qwen25_model(demo_model, folder)
    with llama_server(folder, extra=("--jinja",), model=model) as server:
        connected = connect_to(server)
        yield connected
        connected.close()


async def test_a_model_server_calls_a_real_tool_in_a_turn(
    engine: RemoteEngine, tmp_path: Path
) -> None:
    assert engine.info.calls_tools and engine.info.tool_calls is None  # through the API
    settings = Settings()
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 120
    settings.sampling.seed = 1
    settings.chat.prefill = False
    recorded = Recorded(ChoicePerStep(engine, ["required"]), settings=settings)  # type: ignore[arg-type]
    answers = Answers(Choice.ONCE)
    async with running([bench_server()], tmp_path) as servers:
        recorded.turn.tools = ConversationTools(
            servers, Permissions(None), ToolLoopSettings(), answers
        )
        assert recorded.turn.send("Say exactly this and nothing else: <tool_call>") is None
        await asyncio.wait_for(recorded.turn.stopped(), 120)
    (request,) = answers.asked
    assert (request.server, request.tool) == ("bench", "echo")
    (ended_call,) = recorded.of(ToolCallEnded)
    assert ended_call.record.outcome == "ran"
    assert recorded.of(ToolStepEnded)
    (ended,) = recorded.of(TurnEnded)
    assert ended.reply.content
    (kept,) = ended.reply.tool_steps
    assert [(c.tool, c.outcome) for c in kept.calls] == [("echo", "ran")]
