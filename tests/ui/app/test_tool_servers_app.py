"""Tool servers (MCP) in the app (issue 30 point 1): started in the
background once the first frame is drawn, a server that fails named in one
notice while the chat goes on, and every server ended when kvchat quits.
Real servers: the tests' own JSON-RPC server (quick to start) and a command
that does not exist."""

from __future__ import annotations

from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.tools.config import StdioServerConfig
from chat.tools.status import ServerState
from chat.ui.app import ChatApp, Launch
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.tools.conftest import process_gone, raw_server
from tests.ui.conftest import app_notices


async def test_servers_start_after_the_first_frame_a_failure_is_told_and_quit_ends_them() -> None:
    engine = ScriptedEngine()
    missing = StdioServerConfig("ghost", "/nonexistent/kvchat-no-such-server", ())
    launch = Launch(
        Settings(),
        ModelCandidate(engine.info.path, 1, "test"),
        tool_servers=(raw_server("tools"), missing),
    )
    app = ChatApp(launch, engine_factory=scripted_factory(engine))
    async with app.run_test(size=(100, 30)) as pilot:
        servers = app.tool_servers
        await wait_for(
            lambda: all(s.state is not ServerState.STARTING for s in servers.servers.values()),
            pilot,
            timeout=60,
        )
        good, ghost = servers.servers["tools"], servers.servers["ghost"]
        assert good.state is ServerState.READY and good.tools
        assert ghost.state is ServerState.FAILED
        await wait_for(lambda: any("ghost" in n for n in app_notices(app)), pilot)
        (said,) = [n for n in app_notices(app) if "ghost" in n]
        assert "Traceback" not in said and said.count(". ") <= 1, said
        # The chat goes on.
        await wait_for(lambda: app.chat_screen.engine is not None, pilot)
        pid = good.pid
        assert pid is not None
        await pilot.press("ctrl+q")
        await wait_for(lambda: process_gone(pid), pilot, timeout=20)
