"""Every screen and dialog keeps its buttons on screen, where a click reaches
them, down to 40x12: what does not fit scrolls instead. The chat screen also
keeps its prompt box, and the help screen (F1) lists what the status bar and
the meter leave out at 80 columns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from textual.errors import NoWidget
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Markdown, Static

from chat.ui.app import ChatApp
from chat.ui.screens.attach_file import AttachFileScreen
from chat.ui.screens.conversations import ConversationsScreen
from chat.ui.screens.dialogs import ConfirmScreen, EditReplyScreen, RenameScreen
from chat.ui.screens.help import HelpScreen
from chat.ui.screens.link_confirm import LinkConfirmScreen
from chat.ui.screens.model_picker import ModelPickerScreen
from chat.ui.screens.quit_unsaved import QuitUnsavedScreen
from chat.ui.screens.settings import SettingsScreen
from chat.ui.screens.token_view import TokenViewScreen
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.ui.conftest import (
    LINK,
    LINK_REPLY,
    REPLIES,
    browser_database,
    chat_app,
    on_top,
    one_reply,
    open_browser,
    ready,
)

SMALL = pytest.mark.parametrize("size", [(40, 12), (60, 20)], ids=["40x12", "60x20"])


def reachable(screen: Screen[Any], widget: Widget) -> bool:
    """A click on the middle of `widget` lands on it: it is on screen, not clipped away."""
    region = widget.region
    if not region.width or not region.height:
        return False
    try:
        under, _ = screen.get_widget_at(*region.center)
    except NoWidget:  # off the screen
        return False
    return under is widget or widget in under.ancestors_with_self


async def assert_buttons_reachable(pilot: Pilot[Any], kind: type[Screen[Any]]) -> Screen[Any]:
    screen = await on_top(pilot, kind)
    buttons = list(screen.query(Button).results())
    assert buttons, f"{kind.__name__} has no buttons"
    unreachable = [str(button.label) for button in buttons if not reachable(screen, button)]
    # A button inside a scrolled area (a section's "Reset to defaults") is
    # reached by scrolling; the dialog's own buttons must be there at once.
    unreachable = [label for label in unreachable if label != "Reset to defaults"]
    assert unreachable == [], f"{kind.__name__} at {pilot.app.size}: {unreachable} out of reach"
    return screen


async def open_settings(pilot: Pilot[Any]) -> type[Screen[Any]]:
    assert isinstance(pilot.app, ChatApp)
    await ready(pilot.app, pilot)
    await pilot.press("f2")
    return SettingsScreen


async def open_help(pilot: Pilot[Any]) -> type[Screen[Any]]:
    await one_reply(pilot)
    await pilot.press("f1")
    return HelpScreen


async def open_link(pilot: Pilot[Any]) -> type[Screen[Any]]:
    await one_reply(pilot)
    body = pilot.app.query(AssistantMessageView).last().body
    body.post_message(Markdown.LinkClicked(body, LINK))
    return LinkConfirmScreen


@SMALL
@pytest.mark.parametrize("opener", [open_settings, open_help, open_link], ids=lambda f: f.__name__)
async def test_the_dialogs_keep_their_buttons(
    size: tuple[int, int], opener: Callable[[Pilot[Any]], Awaitable[type[Screen[Any]]]]
) -> None:
    app = chat_app(replies=[LINK_REPLY] if opener is open_link else REPLIES)
    async with app.run_test(size=size) as pilot:
        await assert_buttons_reachable(pilot, await opener(pilot))


@SMALL
@pytest.mark.parametrize("key, kind", [("d", ConfirmScreen), ("r", RenameScreen)])
async def test_the_browsers_dialogs_keep_their_buttons(
    size: tuple[int, int], key: str, kind: type[Screen[Any]], tmp_path: Path
) -> None:
    async with chat_app(database=browser_database(tmp_path)).run_test(size=size) as pilot:
        await open_browser(pilot, rows=4)
        await pilot.press(key)
        await assert_buttons_reachable(pilot, kind)


async def open_edit_reply(pilot: Pilot[Any]) -> type[Screen[Any]]:
    await one_reply(pilot)
    await pilot.press("alt+up")  # the reply selected: F3 edits it in a dialog
    await pilot.press("f3")
    return EditReplyScreen


async def open_attach_file(pilot: Pilot[Any]) -> type[Screen[Any]]:
    assert isinstance(pilot.app, ChatApp)
    await ready(pilot.app, pilot)
    pilot.app.chat_screen.action_attach_file()
    return AttachFileScreen


async def open_quit_unsaved(pilot: Pilot[Any]) -> type[Screen[Any]]:
    assert isinstance(pilot.app, ChatApp)
    await ready(pilot.app, pilot)
    dialog = QuitUnsavedScreen(
        3, "the disk is full", lambda: False, lambda: Path("/tmp/kvchat-unsaved.json")
    )
    pilot.app.push_screen(dialog)
    return QuitUnsavedScreen


@SMALL
@pytest.mark.parametrize("opener", [open_edit_reply, open_quit_unsaved], ids=lambda f: f.__name__)
async def test_the_other_dialogs_keep_their_buttons(
    size: tuple[int, int], opener: Callable[[Pilot[Any]], Awaitable[type[Screen[Any]]]]
) -> None:
    """Editing a reply (F3), and the question Ctrl+Q asks when messages cannot be saved."""
    async with chat_app().run_test(size=size) as pilot:
        await assert_buttons_reachable(pilot, await opener(pilot))


@SMALL
async def test_the_file_picker_keeps_its_path_field(size: tuple[int, int]) -> None:
    """Attaching a file (the palette): a path field, Enter attaches, Esc cancels."""
    async with chat_app().run_test(size=size) as pilot:
        picker = await on_top(pilot, await open_attach_file(pilot))
        assert reachable(picker, picker.query_one(Input))


@SMALL
async def test_the_chat_screen_keeps_its_prompt_box(size: tuple[int, int]) -> None:
    async with chat_app().run_test(size=size) as pilot:
        await one_reply(pilot)
        screen = pilot.app.screen
        assert reachable(screen, screen.query_one(PromptBox))


@SMALL
async def test_the_full_screens_keep_their_lists(size: tuple[int, int], tmp_path: Path) -> None:
    """The browser's table, the model picker's table and the token view's tokens."""
    async with chat_app(database=browser_database(tmp_path)).run_test(size=size) as pilot:
        browser = await open_browser(pilot, rows=4)
        assert reachable(browser, browser.query_one(DataTable))
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(pilot.app.screen, ConversationsScreen), pilot)
        await pilot.press("f8")
        picker = await on_top(pilot, ModelPickerScreen)
        assert reachable(picker, picker.query_one(DataTable))
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(pilot.app.screen, ModelPickerScreen), pilot)
    async with chat_app(replies=REPLIES[1:]).run_test(size=size) as pilot:
        await one_reply(pilot)
        await pilot.press("ctrl+t")
        view = await on_top(pilot, TokenViewScreen)
        tokens = view.query(Static).first()
        assert reachable(view, tokens)


async def test_help_lists_what_the_bars_leave_out_at_80_columns() -> None:
    async with chat_app().run_test(size=(80, 24)) as pilot:
        screen = await one_reply(pilot)
        status = str(screen.query_one("#status", Static).render())
        assert status.startswith("first 0.")
        assert "tok/s · reused" in status
        assert status.endswith("…F1")  # the model and the device did not fit
        meter = str(screen.query_one("#meter", Static).render())
        for label in ("sys", "earlier", "new", "reply", "resv", "free"):
            assert f"█{label} " in meter
        await pilot.click("#status")
        help_screen = await on_top(pilot, HelpScreen)
        lines = [str(item.render()) for item in help_screen.query(Static).results()]
        assert any(line.startswith("scripted · ") for line in lines)  # the model
        assert any("CPU only" in line for line in lines)  # the device
        assert any(line.startswith("sent ") and "evaluated" in line for line in lines)
        assert any(line.startswith("reserved: ") for line in lines)
        assert "Switch model, or download one" in lines  # F8, not in the footer at 120
        # The keys scroll the help as it opens (the Close button had the
        # focus, and Page Down did nothing).
        body = help_screen.query_one("#help-body")
        assert body.max_scroll_y > 0
        await pilot.press("pagedown")
        await wait_for(lambda: body.scroll_y > 0, pilot)
        await pilot.press("end")
        await wait_for(lambda: body.scroll_y == body.max_scroll_y, pilot)


@pytest.mark.parametrize(
    ("columns", "end"),
    [
        (120, "seed 1234  │  CPU only (llama-cpp-pyt…F1"),
        (140, "built without GP…F1"),
        (160, "support)"),
    ],
)
async def test_a_wide_bar_that_does_not_fit_ends_with_f1(columns: int, end: str) -> None:
    # From 120 columns the bar shows whole parts (model, reply, device); what
    # did not fit was cut off by the terminal mid-phrase, with no sign that
    # the rest is in the help (F1).
    async with chat_app().run_test(size=(columns, 30)) as pilot:
        screen = await one_reply(pilot)
        bar = screen.query_one("#status", Static)
        status = str(bar.render())
        assert cell_len(status) <= bar.content_size.width
        assert status.endswith(end)  # as much as fits, then "…F1"; or the whole line


async def test_the_cursor_stays_in_sight_when_a_narrower_terminal_wraps_the_draft() -> None:
    # A 30-line draft, the cursor on its 26th line: at 40 columns each line
    # wraps in two rows, and the box showed lines 8 to 13, the cursor far below.
    app = chat_app()
    async with app.run_test(size=(110, 34)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot)
        box = app.query_one(PromptBox)
        box.focus()
        box.insert("\n".join(f"line {i} of a long draft that goes on and on" for i in range(30)))
        await pilot.pause()
        box.move_cursor((25, 0))
        await pilot.pause()
        for width in (40, 60, 110):
            await pilot.resize_terminal(width, 24)
            await pilot.pause()
            await pilot.pause()
            row = box.wrapped_document.location_to_offset(box.cursor_location).y
            assert box.scroll_y <= row < box.scroll_y + box.scrollable_content_region.height, width
