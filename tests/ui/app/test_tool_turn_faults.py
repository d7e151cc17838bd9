"""Faults during the app's tool turn (issue 30, point 8): a real stdio MCP
server killed while its call runs, and the disk filling while a tool step is
saved. Each: one clear sentence, the conversation and the steps so far kept
(on screen and in the database), no hang, and the chat goes on. The model is
scripted (its call is the fault's setting, not what is tested); the server
killed is the tests' SDK-written one, started by the app from its config."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from chat.conversations.store import Store
from chat.engine.tool_calls.calls import ToolCall
from chat.settings.schema import Settings
from chat.tools.status import ServerState
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.quit_unsaved import QuitUnsavedScreen
from chat.ui.screens.tool_permission import ToolPermissionScreen
from chat.ui.widgets.tool_call_block import ToolCallBlock
from tests.conftest import turn_done, wait_for
from tests.fakes import scripted_factory
from tests.faults import Fault
from tests.tool_fakes import FakeToolServers, ScriptedToolEngine, echo_call
from tests.tools.conftest import raw_server, sdk_server
from tests.ui.conftest import MODEL, app_notices, on_top, ready, reply_on_screen, send

KILLED = "The tool server 'victim' was killed by SIGKILL during the call to 'wait'."


async def test_a_server_killed_during_a_call(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    engine = ScriptedToolEngine(
        [["Let", " me", " wait."], ["The", " server", " died."], ["Fine."]],
        {0: ToolCall("victim_wait", {"seconds": 600})},
    )
    settings = Settings()
    settings.chat.system_prompt = ""
    launch = Launch(
        settings,
        MODEL,
        tool_servers=(sdk_server("victim", "--marks", str(marks)), raw_server("steady")),
    )
    app = ChatApp(launch, engine_factory=scripted_factory(engine))
    async with app.run_test(size=(100, 30)) as pilot:
        servers = app.tool_servers
        await wait_for(
            lambda: all(s.state is ServerState.READY for s in servers.servers.values()),
            pilot,
            timeout=60,
        )
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await send(pilot, "Wait a while.")
        await on_top(pilot, ToolPermissionScreen)
        await pilot.press("o")
        await wait_for(lambda: (marks / "started").exists(), pilot, timeout=30)
        pid = servers.servers["victim"].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        # The call ends with the sentence; the model reads it and answers.
        await turn_done(screen, pilot, 2, timeout=30)
        (block,) = app.query(ToolCallBlock)
        assert block.state == "failed"
        assert block.record is not None and block.record.result == f"Error: {KILLED}"
        block.folded = False
        await pilot.pause()
        assert KILLED in str(block.render())
        assert reply_on_screen(app) == "The server died."
        # The server is named in one sentence, once, and not offered again.
        await wait_for(lambda: servers.servers["victim"].state is ServerState.FAILED, pilot)
        died = [n for n in app_notices(app) if "victim" in n]
        assert died == ["The tool server 'victim' was killed by SIGKILL."], app_notices(app)
        # Kept: the step, its failed call and the answer, in the database.
        conversation_id = screen.conversation.id
        assert conversation_id is not None
        assert app.store is not None
        with Store(app.store.path) as store:
            reply = store.get_conversation(conversation_id).messages[-1]
        (step,) = reply.tool_steps
        assert [(c.tool, c.outcome, c.result) for c in step.calls] == [
            ("wait", "failed", f"Error: {KILLED}")
        ]
        assert (step.content, reply.content) == ("Let me wait.", "The server died.")
        # The next turn goes on without that server: its tools are not offered.
        await send(pilot, "And now?")
        await turn_done(screen, pilot, 4, timeout=30)
        assert engine.offered[-1] == ["fine", "crash", "wait"]
        assert reply_on_screen(app) == "Fine."


def disk_tool_app(database: Path) -> ChatApp:
    """The app saving to `database`, over a model that says "Let me look.",
    calls echo("hi"), then answers "It says hi.", and a scripted server
    whose call waits for its `release`."""
    engine = ScriptedToolEngine(
        [["Let", " me", " look."], ["It", " says", " hi."]], {0: echo_call("hi")}
    )
    settings = Settings()
    settings.chat.system_prompt = ""
    app = ChatApp(
        Launch(settings, MODEL, database=database), engine_factory=scripted_factory(engine)
    )
    servers = FakeToolServers()
    servers.hold = True
    tools = app.turn.tools
    assert tools is not None
    tools.caller = servers
    tools.reset()
    return app


def servers_of(app: ChatApp) -> FakeToolServers:
    tools = app.turn.tools
    assert tools is not None and isinstance(tools.caller, FakeToolServers)
    return tools.caller


async def until_the_call_runs(app: ChatApp, pilot: Pilot[Any]) -> ChatScreen:
    """The question sent, the call allowed once, and running (held)."""
    screen = await ready(app, pilot)
    await wait_for(lambda: app.store is not None, pilot)
    await send(pilot, "What does echo say?")
    await on_top(pilot, ToolPermissionScreen)
    await pilot.press("o")
    await wait_for(lambda: servers_of(app).called, pilot)
    return screen


async def test_the_disk_filling_while_a_tool_step_is_saved(small_folder: Fault) -> None:
    if not small_folder.real:
        pytest.fail("this machine cannot mount a small tmpfs (root is needed)")
    database = small_folder.folder / "conversations.db"
    app = disk_tool_app(database)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await until_the_call_runs(app, pilot)
        small_folder.break_again()  # full when the call ends and its step is written
        servers_of(app).release.set()
        await turn_done(screen, pilot, 2)
        notices = [n for n in app_notices(app) if "full" in n]
        assert len(notices) == 1, app_notices(app)
        assert str(database.parent) in notices[0]
        # On screen as it came: the call, its result, the answer.
        (block,) = app.query(ToolCallBlock)
        assert block.state == "ran" and block.record is not None
        assert block.record.result == "hi"
        assert reply_on_screen(app) == "It says hi."
        # Room again: saved whole, the steps with the answer.
        small_folder.heal()
        await wait_for(lambda: not screen.saver.failing, pilot, 10)
    with Store(database) as store:
        (summary,) = store.list_conversations()
        user, reply = store.get_conversation(summary.id).messages
    assert (user.content, reply.content) == ("What does echo say?", "It says hi.")
    (step,) = reply.tool_steps
    assert step.content == "Let me look."
    assert [(c.tool, c.outcome, c.result) for c in step.calls] == [("echo", "ran", "hi")]
    assert reply.state == "complete"


async def test_a_server_killed_while_its_call_is_asked_about(tmp_path: Path) -> None:
    engine = ScriptedToolEngine(
        [["Let", " me", " look."], ["No", " echo."]], {0: ToolCall("echo", {"text": "hi"})}
    )
    settings = Settings()
    settings.chat.system_prompt = ""
    launch = Launch(settings, MODEL, tool_servers=(sdk_server("victim"),))
    app = ChatApp(launch, engine_factory=scripted_factory(engine))
    async with app.run_test(size=(100, 30)) as pilot:
        servers = app.tool_servers
        await wait_for(
            lambda: servers.servers["victim"].state is ServerState.READY, pilot, timeout=60
        )
        screen = await ready(app, pilot)
        await send(pilot, "Echo hi.")
        await on_top(pilot, ToolPermissionScreen)
        pid = servers.servers["victim"].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: servers.servers["victim"].state is ServerState.FAILED, pilot)
        await pilot.press("o")  # run once: the server is gone
        await turn_done(screen, pilot, 2, timeout=30)
        (block,) = app.query(ToolCallBlock)
        assert block.state == "failed" and block.record is not None
        assert block.record.result == (
            "Error: The tool server 'victim' was killed by SIGKILL, "
            "so the call to 'echo' was not made."
        )
        assert reply_on_screen(app) == "No echo."


async def test_quitting_while_the_disk_is_still_full_keeps_the_steps_in_a_file(
    small_folder: Fault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not small_folder.real:
        pytest.fail("this machine cannot mount a small tmpfs (root is needed)")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # where "Save to a file" writes first
    database = small_folder.folder / "conversations.db"
    app = disk_tool_app(database)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await until_the_call_runs(app, pilot)
        small_folder.break_again()
        servers_of(app).release.set()
        await turn_done(screen, pilot, 2)
        await pilot.press("ctrl+q")
        dialog = await on_top(pilot, QuitUnsavedScreen)
        shown = " ".join(str(w.render()) for w in dialog.query(Static))
        assert "1 message is not saved" in shown, shown
        await pilot.click("#elsewhere")
        await wait_for(lambda: app.return_code is not None, pilot)
    (saved,) = home.glob("kvchat-unsaved-*.json")
    messages = json.loads(saved.read_text(encoding="utf-8"))["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant"], messages
    assert messages[1]["content"] == "Let me look."
    assert messages[1]["tool_calls"][0]["function"]["name"] == "echo"
    assert (messages[2]["content"], messages[3]["content"]) == ("hi", "It says hi.")
