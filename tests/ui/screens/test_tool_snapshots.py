"""Screenshots of tools on the chat screen: the question before a call
(80x24 and 120x40), a reply's call folded and unfolded (80x24), the tools
pane (80x24 and 120x40); compared with the SVGs in `__snapshots__/` like
`test_snapshots.py`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot

from chat.tools.permissions import Choice
from chat.ui.meter_planner import METER_DEBOUNCE_S
from chat.ui.screens.tools import ToolsScreen
from chat.ui.widgets.tool_call_block import ToolCallBlock
from tests.conftest import turn_done
from tests.tool_fakes import FakeToolServers
from tests.ui.conftest import on_top, ready, run_command
from tests.ui.screens.test_snapshots import steady
from tests.ui.screens.test_tool_calls import asked, tool_app


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_tool_permission_dialog(size: tuple[int, int], snap_compare: Any) -> None:
    """The model calls echo: the tool, its server, its arguments, four answers."""
    app, _, _ = tool_app()

    async def run_before(pilot: Pilot[Any]) -> None:
        await asked(pilot)
        await steady(pilot)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_tools_pane(size: tuple[int, int], snap_compare: Any) -> None:
    """Two servers, one tool turned off, one tool always allowed."""
    servers = FakeToolServers({"notes": ["echo", "search"], "web": ["fetch"]})
    app, _, _ = tool_app({}, [["Plain."]], servers)
    tools = app.turn.tools
    assert tools is not None
    tools.tools_off.add(("notes", "search"))
    tools.permissions.record(Choice.TOOL, "notes", "echo")

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app, pilot)
        await run_command(pilot, "Tool servers", "Tool servers")
        await on_top(pilot, ToolsScreen)
        await steady(pilot)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("folded", [True, False], ids=["folded", "unfolded"])
def test_tool_call_block(folded: bool, snap_compare: Any) -> None:
    """A reply that called echo: the step's text, its figures, the call's
    block (folded: one line; unfolded: the arguments and the result), then
    the answer."""
    app, _, _ = tool_app()

    async def run_before(pilot: Pilot[Any]) -> None:
        await asked(pilot)
        # The meter plans again a moment after the prompt box changed (it was
        # emptied as the message went), unless a reply is being drawn then: a
        # real reply takes longer than that pause, so the picture is taken
        # with the meter as it was at the reply's end.
        await pilot.pause(2 * METER_DEBOUNCE_S)
        await pilot.press("o")
        await turn_done(app.chat_screen, pilot, 2)
        (block,) = app.query(ToolCallBlock)
        assert block.record is not None
        block.finish(replace(block.record, duration_s=0.12))  # a fixed time, for the picture
        block.folded = folded
        app.set_focus(None)
        await steady(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
