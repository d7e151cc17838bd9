"""Textual bugs that stopped kvchat, worked around (chat.ui.textual_fixes and
kvchat's own screen classes), and what happens on a Textual not tested."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.drivers.linux_driver import LinuxDriver
from textual.screen import Screen
from textual.widgets import OptionList

from chat.ui import textual_fixes
from chat.ui.screens.base import Dialog, KvchatScreen
from chat.ui.terminal_input import TypingDriver, typing_driver
from chat.ui.textual_fixes import install


class OneList(App[None]):
    def compose(self) -> ComposeResult:
        yield OptionList()


async def test_page_keys_in_an_option_list_not_laid_out_yet() -> None:
    # As the command palette's results arrive: options added, one
    # highlighted, and Page Down before the next layout (KeyError in 8.2).
    install()
    install()  # once is enough; twice changes nothing
    app = OneList()
    async with app.run_test() as pilot:
        options = app.query_one(OptionList)
        options.add_options([f"option {i}" for i in range(50)])
        options.highlighted = 3
        options.action_page_down()
        options.action_page_up()
        assert options.highlighted == 3
        # Once laid out, the keys page as before.
        await pilot.pause()
        options.action_page_down()
        assert options.highlighted is not None and options.highlighted > 3


async def test_a_screen_dismissed_twice_answers_once() -> None:
    # Enter twice in quick succession in a dialog: the second dismiss came
    # after the dialog had gone, called its callback again and popped the
    # screen below (the last one: ScreenStackError).
    answers: list[str | None] = []
    app = OneList()
    async with app.run_test() as pilot:
        below = app.screen
        dialog: Dialog[str] = Dialog()
        await app.push_screen(dialog, callback=answers.append)
        dialog.dismiss("first")
        dialog.dismiss("second")
        await pilot.pause()
        assert answers == ["first"] and app.screen is below
        # A screen under another one does not pop that one either.
        under: KvchatScreen[str] = KvchatScreen()
        over: Screen[str] = Screen()
        await app.push_screen(under, callback=answers.append)
        await app.push_screen(over, callback=answers.append)
        under.dismiss("stale")
        await pilot.pause()
        assert answers == ["first"] and app.screen is over


def test_on_a_textual_not_tested_textual_s_own_ways_are_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert textual_fixes.untested_textual() is None
    assert typing_driver(LinuxDriver) is TypingDriver
    monkeypatch.setattr(textual_fixes, "textual_version", lambda: "9.0.0")
    notice = textual_fixes.untested_textual()
    assert notice is not None and notice.startswith("Textual 9.0.0 is not a version")
    assert typing_driver(LinuxDriver) is LinuxDriver


def test_the_version_is_read_once_not_at_each_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual reads its `__version__` from the package's metadata at each
    access (about a millisecond); the screens ask whether it is a known
    version at each frame (`chat.ui.frame_timer`)."""
    import importlib.metadata

    textual_fixes.textual_known()
    reads: list[str] = []
    real_version = importlib.metadata.version

    def version(name: str) -> str:
        reads.append(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert textual_fixes.textual.__version__  # Textual's own: read again
    assert reads == ["textual"]
    for _ in range(100):
        assert textual_fixes.textual_known()
    assert reads == ["textual"]
