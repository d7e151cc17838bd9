"""Screenshots of tools on the chat screen at 80x24: the question before a
call, and a reply's call folded and unfolded; compared with the SVGs in
`__snapshots__/` like `test_snapshots.py`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot

from chat.ui.widgets.tool_call_block import ToolCallBlock
from tests.conftest import turn_done
from tests.ui.screens.test_snapshots import steady
from tests.ui.screens.test_tool_calls import asked, tool_app


def test_tool_permission_dialog(snap_compare: Any) -> None:
    """The model calls echo: the tool, its server, its arguments, four answers."""
    app, _, _ = tool_app()

    async def run_before(pilot: Pilot[Any]) -> None:
        await asked(pilot)
        await steady(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.mark.parametrize("folded", [True, False], ids=["folded", "unfolded"])
def test_tool_call_block(folded: bool, snap_compare: Any) -> None:
    """A reply that called echo: the step's text, its figures, the call's
    block (folded: one line; unfolded: the arguments and the result), then
    the answer."""
    app, _, _ = tool_app()

    async def run_before(pilot: Pilot[Any]) -> None:
        await asked(pilot)
        await pilot.press("o")
        await turn_done(app.chat_screen, pilot, 2)
        (block,) = app.query(ToolCallBlock)
        assert block.record is not None
        block.finish(replace(block.record, duration_s=0.12))  # a fixed time, for the picture
        block.folded = folded
        app.set_focus(None)
        await steady(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
