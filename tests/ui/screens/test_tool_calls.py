"""Tools on the chat screen (issue 30 points 2, 3, 5): the question before a
call with the tool, its server and its whole arguments, the four answers by
key and button; each call a folded block of its own, unfolded by alt+c and a
click; the tools pane and the palette. The scripted model and scripted
servers (tests/tool_fakes.py); the real ones are in
tests/session/test_tool_turn.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Button, OptionList, Static

from chat.engine.reasoning.markers import THINK, Reasoning
from chat.engine.tool_calls.calls import ToolCall
from chat.session.tool_loop import ToolLoopSettings
from chat.settings.schema import Settings
from chat.tools.permissions import Choice, Grant
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.settings import SettingsScreen
from chat.ui.screens.tool_permission import ToolPermissionScreen
from chat.ui.screens.tools import ToolsScreen
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.tool_call_block import ToolCallBlock, ToolSteps
from tests.conftest import turn_done, wait_for
from tests.fakes import scripted_factory
from tests.tool_fakes import FakeToolServers, ScriptedToolEngine, echo_call
from tests.ui.conftest import (
    MODEL,
    app_notices,
    on_top,
    open_pane,
    ready,
    reply_on_screen,
    run_command,
    send,
    set_field,
)


def tool_app(
    calls: dict[int, ToolCall] | None = None,
    replies: list[list[str]] | None = None,
    servers: FakeToolServers | None = None,
) -> tuple[ChatApp, ScriptedToolEngine, FakeToolServers]:
    """The app over a model that says "Let me look.", calls echo("hi"), then
    answers "It says hi.", with scripted servers in place of mcp.json's."""
    engine = ScriptedToolEngine(
        replies or [["Let", " me", " look."], ["It", " says", " hi."]],
        calls if calls is not None else {0: echo_call("hi")},
    )
    settings = Settings()
    settings.chat.system_prompt = ""
    app = ChatApp(Launch(settings, MODEL), engine_factory=scripted_factory(engine))
    servers = servers or FakeToolServers()
    tools = app.turn.tools
    assert tools is not None
    tools.caller = servers
    tools.reset()
    return app, engine, servers


def static_text(screen: Any, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def asked(pilot: Pilot[Any], text: str = "What does echo say?") -> ToolPermissionScreen:
    await ready(pilot.app, pilot)
    await send(pilot, text)
    dialog = await on_top(pilot, ToolPermissionScreen)
    assert isinstance(dialog, ToolPermissionScreen)
    return dialog


async def reopened(app: ChatApp, pilot: Pilot[Any]) -> None:
    """A new conversation, then the one held opened again, its calls drawn."""
    conversation_id = app.chat_screen.conversation.id
    assert conversation_id is not None
    await pilot.press("ctrl+n")
    await wait_for(lambda: not app.query(ToolCallBlock), pilot)
    assert await app.chat_screen.open_conversation(conversation_id)
    await wait_for(lambda: app.query(ToolCallBlock), pilot)


async def test_the_question_shows_the_call_and_run_once_runs_it() -> None:
    app, _, servers = tool_app()
    async with app.run_test(size=(100, 30)) as pilot:
        dialog = await asked(pilot)
        shown = "\n".join(str(widget.render()) for widget in dialog.query(Static))
        assert "Tool: echo" in shown and "Server: notes" in shown
        assert '"text": "hi"' in shown
        assert servers.called == []  # nothing runs before the answer
        await pilot.press("o")
        await turn_done(app.chat_screen, pilot, 2)
        assert servers.called == [("notes", "echo", {"text": "hi"})]
        assert reply_on_screen(app) == "It says hi."
        (block,) = app.query(ToolCallBlock)
        assert block.folded
        line = str(block.render())
        assert line.startswith('▸ echo · notes · {"text": "hi"}')
        assert "result 1 token" in line and "Result:" not in line
        steps = str(app.query_one(ToolSteps).query(Static).first().render())
        assert steps == "Let me look."  # the step's text, above its call
        # alt+c unfolds the newest reply's calls; a click folds it again.
        await pilot.press("alt+c")
        await wait_for(lambda: not block.folded, pilot)
        assert "Result:\nhi" in str(block.render())
        await pilot.click(block)
        await wait_for(lambda: block.folded, pilot)
        # Kept: a new conversation, then this one opened again, draws the call.
        await reopened(app, pilot)
        (kept,) = app.query(ToolCallBlock)
        assert kept.folded and kept.state == "ran"
        assert str(kept.render()) == line
        assert reply_on_screen(app) == "It says hi."


async def test_refuse_by_button_and_escape_tell_the_model() -> None:
    app, engine, servers = tool_app(
        {0: echo_call("a"), 2: echo_call("b")},
        [["Look."], ["Refused."], ["Again."], ["Refused again."]],
    )
    async with app.run_test(size=(100, 30)) as pilot:
        dialog = await asked(pilot)
        await pilot.click(dialog.query_one("#refuse", Button))
        await turn_done(app.chat_screen, pilot, 2)
        await send(pilot, "Once more")
        await on_top(pilot, ToolPermissionScreen)
        await pilot.press("escape")
        await turn_done(app.chat_screen, pilot, 4)
        assert servers.called == []
        refusals = [
            call[0][-1]["content"] for call in engine.calls if call[0][-1]["role"] == "tool"
        ]
        assert refusals == ["The user refused to run this tool call."] * 2
        blocks = list(app.query(ToolCallBlock))
        assert [b.state for b in blocks] == ["refused", "refused"]
        assert all("refused" in str(b.render()) for b in blocks)


async def test_always_this_tool_is_kept_listed_in_the_pane_and_taken_back() -> None:
    app, _, servers = tool_app(
        {0: echo_call("a"), 2: echo_call("b")}, [["Look."], ["Done."], ["Again."], ["Done."]]
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await asked(pilot)
        await pilot.press("t")
        await turn_done(app.chat_screen, pilot, 2)
        await send(pilot, "Once more")
        await turn_done(app.chat_screen, pilot, 4)  # not asked again
        assert len(servers.called) == 2
        tools = app.turn.tools
        assert tools is not None
        assert tools.permissions.lasting() == [Grant("notes", "echo")]
        await run_command(pilot, "Tool servers", "Tool servers")
        pane = await on_top(pilot, ToolsScreen)
        grants = pane.query_one("#tool-grants", OptionList)
        assert "the tool 'echo' of the server 'notes'" in str(grants.get_option_at_index(0).prompt)
        await pilot.press("tab")  # its first row is highlighted: Enter did nothing before
        assert pane.focused is grants
        await pilot.press("enter")
        await wait_for(lambda: tools.permissions.lasting() == [], pilot)
        assert any("Taken back" in notice for notice in app_notices(app))


async def test_the_pane_turns_a_server_off_and_tools_off_for_the_conversation() -> None:
    app, engine, _ = tool_app({}, [["Plain."]], FakeToolServers({"notes": ["echo", "other"]}))
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        tools = app.turn.tools
        assert tools is not None
        await run_command(pilot, "Tool servers", "Tool servers")
        pane = await on_top(pilot, ToolsScreen)
        listed = pane.query_one("#tool-servers", OptionList)
        rows = [str(listed.get_option_at_index(i).prompt) for i in range(listed.option_count)]
        assert rows[0].startswith("[on]  notes · ready · 2 tools")
        assert "echo" in rows[1] and "other" in rows[2]
        assert pane.focused is listed and listed.highlighted == 0  # Enter acts at once
        await pilot.press("enter")
        assert tools.servers_off == {"notes"}
        # A tool of a server that is off: said so, not switched out of sight.
        await pilot.press("down", "enter")
        assert tools.tools_off == set()
        assert any("is off for this conversation" in notice for notice in app_notices(app))
        await pilot.press("up", "enter")
        assert tools.servers_off == set()
        listed.highlighted = 2
        await pilot.press("enter")
        assert tools.tools_off == {("notes", "other")}
        assert [o.definition.name for o in app.turn.tools_to_offer()] == ["echo"]
        await pilot.press("a")
        assert not tools.on
        assert "Off for this conversation" in static_text(pane, "#tools-state")
        await pilot.press("escape")
        await send(pilot, "Hi")
        await turn_done(app.chat_screen, pilot, 2)
        assert engine.offered == [[]]


async def test_untrusted_arguments_and_results_show_as_plain_text() -> None:
    sneaky = "[bold red]x[/] [@click=app.quit]y[/] \x1b[31mred\x1b[0m"
    app, _, _ = tool_app({0: echo_call(sneaky)})
    async with app.run_test(size=(100, 30)) as pilot:
        dialog = await asked(pilot)
        shown = "\n".join(str(widget.render()) for widget in dialog.query(Static))
        assert "[bold red]x[/]" in shown and "[@click=app.quit]" in shown
        assert "\x1b" not in shown
        await pilot.press("o")
        await turn_done(app.chat_screen, pilot, 2)
        (block,) = app.query(ToolCallBlock)
        block.folded = False
        await pilot.pause()
        text = str(block.render())
        assert "[@click=app.quit]y[/]" in text and "\x1b" not in text


async def test_esc_on_the_chat_screen_stops_a_running_call() -> None:
    servers = FakeToolServers()
    servers.hold = True
    app, engine, _ = tool_app(servers=servers)
    async with app.run_test(size=(100, 30)) as pilot:
        await asked(pilot)
        await pilot.press("o")
        await wait_for(lambda: servers.called, pilot)
        (block,) = app.query(ToolCallBlock)
        await wait_for(lambda: block.state == "running", pilot)
        await pilot.press("escape")
        await turn_done(app.chat_screen, pilot, 2)
        assert servers.cancelled == 1
        assert block.state == "cancelled"
        assert len(engine.calls) == 1


async def test_quitting_while_asked_ends_the_turn_and_the_app() -> None:
    app, _, servers = tool_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await asked(pilot)
        await pilot.press("ctrl+q")
        await wait_for(lambda: not app.is_running, pilot)
    assert servers.called == []
    assert not app.turn.generating


async def test_the_pane_says_when_the_model_cannot_call_tools() -> None:
    # A model whose chat template does not show it how (the demo model's):
    # the servers are ready, but nothing is offered, and the pane says why.
    app, engine, _ = tool_app({}, [["Plain."]])
    engine.info = replace(engine.info, tool_calls=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await send(pilot, "Hello")
        await turn_done(app.chat_screen, pilot, 2)
        await run_command(pilot, "Tool servers", "Tool servers")
        pane = await on_top(pilot, ToolsScreen)
        state = static_text(pane, "#tools-state")
        assert "none is offered" in state
        assert "cannot call tools: its chat template does not show it how" in state


async def test_a_reasoning_models_step_is_drawn_without_its_markers_when_reopened() -> None:
    app, engine, _ = tool_app(
        replies=[
            ["<think>", "I", " should", " look.", "</think>", "Let", " me", " look."],
            ["It", " says", " hi."],
        ]
    )
    engine.info = replace(engine.info, reasoning=Reasoning(THINK, "template"))
    async with app.run_test(size=(100, 30)) as pilot:
        await asked(pilot)
        await pilot.press("o")
        await turn_done(app.chat_screen, pilot, 2)
        await reopened(app, pilot)
        drawn = "\n".join(str(line.render()) for line in app.query_one(ToolSteps).query(Static))
        assert "Let me look." in drawn
        assert "<think>" not in drawn and "I should look." not in drawn


async def test_the_tool_loop_settings_changed_in_the_pane_apply_to_the_next_turn() -> None:
    # A model that calls echo at every step, until the turn's most steps.
    app, engine, servers = tool_app({n: echo_call(str(n)) for n in range(20)}, [["Look."]])
    tools = app.turn.tools
    assert tools is not None
    tools.permissions.record(Choice.TOOL, "notes", "echo")  # no question
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "tools.max_steps", "2")
        await set_field(pane, pilot, "tools.result_token_limit", "64")
        await pilot.click("#apply")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        assert tools.settings == ToolLoopSettings(max_steps=2, result_token_limit=64)
        await send(pilot, "Loop")
        await turn_done(app.chat_screen, pilot, 2)
        assert len(engine.calls) == 2  # stopped at the new most steps, no restart
        assert any("2 steps" in notice for notice in app_notices(app))
        assert len(servers.called) == 2


def meter_system(app: ChatApp) -> int:
    """The system part of the meter: the system prompt and the tool definitions."""
    state = app.chat_screen.query_one(ContextMeter).state
    return -1 if state is None else state.system


async def test_the_tools_turned_off_stay_off_when_the_conversation_is_reopened() -> None:
    def servers() -> FakeToolServers:
        return FakeToolServers({"notes": ["echo", "other"], "time": ["now"]})

    app, engine, _ = tool_app({}, [["Plain."], ["Again."]], servers())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        tools = app.turn.tools
        assert tools is not None
        await send(pilot, "Hi")
        await turn_done(app.chat_screen, pilot, 2)
        assert engine.offered == [["echo", "other", "now"]]
        await wait_for(lambda: meter_system(app) > 0, pilot)
        all_on = meter_system(app)
        await run_command(pilot, "Tool servers", "Tool servers")
        pane = await on_top(pilot, ToolsScreen)
        listed = pane.query_one("#tool-servers", OptionList)
        rows = [str(listed.get_option_at_index(i).prompt) for i in range(listed.option_count)]
        listed.focus()
        for name in ("other", "time"):
            listed.highlighted = next(i for i, row in enumerate(rows) if f" {name}" in row)
            await pilot.press("enter")
        await pilot.press("escape")
        await wait_for(lambda: 0 < meter_system(app) < all_on, pilot)
        fewer = meter_system(app)
        conversation_id = app.chat_screen.conversation.id
        assert conversation_id is not None
        # A new conversation has every tool on, and the meter counts them all.
        await pilot.press("ctrl+n")
        await wait_for(lambda: not tools.tools_off and not tools.servers_off, pilot)
        await wait_for(lambda: meter_system(app) == all_on, pilot)
        # Opened again: what was off is off, counted before anything is sent.
        assert await app.chat_screen.open_conversation(conversation_id)
        assert tools.tools_off == {("notes", "other")} and tools.servers_off == {"time"}
        await wait_for(lambda: meter_system(app) == fewer, pilot)
        await send(pilot, "Again")
        await turn_done(app.chat_screen, pilot, 4)
        assert engine.offered[-1] == ["echo"]
        # The palette's switch is kept too.
        await run_command(pilot, "Turn tools on", "Turn tools on or off")
        assert not tools.on
    # Another run of the app, resuming the conversation at start.
    again, engine, _ = tool_app({}, [["Off."]], servers())
    again.launch.resume = conversation_id
    async with again.run_test(size=(100, 30)) as pilot:
        await ready(again, pilot)
        await wait_for(lambda: again.chat_screen.conversation.id == conversation_id, pilot)
        tools = again.turn.tools
        assert tools is not None and not tools.on
        assert tools.tools_off == {("notes", "other")} and tools.servers_off == {"time"}
        await run_command(pilot, "Turn tools on", "Turn tools on or off")
        await send(pilot, "And now?")
        await turn_done(again.chat_screen, pilot, 6)
        assert engine.offered == [["echo"]]
        # A fork keeps them.
        await again.chat_screen.conversations.fork(None)
        forked = again.chat_screen.conversation
        assert forked.id not in (None, conversation_id)
        assert tools.tools_off == {("notes", "other")} and tools.servers_off == {"time"}
        store = again.chat_screen.saver.store
        assert store is not None and forked.id is not None
        assert store.get_conversation(forked.id).tool_switches == forked.tool_switches
        assert forked.tool_switches.tools == {("notes", "other")}
