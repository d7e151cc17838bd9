"""Screenshots of the chat screen mid-conversation, compared with the SVGs in
`__snapshots__/` (pytest-textual-snapshot, with the Textual pinned in the
`test` extra). After a deliberate change of the UI, look at the new pictures:

    python -m pytest tests/ui/test_snapshots.py --snapshot-update
    cp tests/ui/__snapshots__/test_snapshots/test_chat_screen[kvchat-dark].svg docs/screenshot.svg

Everything on screen is fixed: the scripted engine's model name and figures,
the terminal size, and no focused prompt box (so no blinking cursor).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import MODEL, ready, send, turn_done

SIZE = (100, 30)
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_snapshots"
README_SCREENSHOT = Path(__file__).parents[2] / "docs" / "screenshot.svg"

REPLIES = [
    "Slicing gives a reversed **copy**; `reverse()` turns the list around in place:\n\n"
    "```python\nitems = [1, 2, 3]\nprint(items[::-1])  # [3, 2, 1]\n"
    "items.reverse()\nprint(items)        # [3, 2, 1]\n```\n",
    "`reversed(items)` is lazy: it walks the list backwards without copying it.",
]


def as_tokens(text: str) -> list[str]:
    """Word-sized chunks, so the header counts a plausible number of tokens."""
    return re.findall(r"\s*\S+", text)


def chat_app(theme: str) -> ChatApp:
    settings = Settings()
    settings.ui.theme = theme
    settings.chat.system_prompt = "You are a concise Python tutor."
    engine = ScriptedEngine(replies=[as_tokens(reply) for reply in REPLIES])
    return ChatApp(Launch(settings, MODEL), engine_factory=scripted_factory(engine))


async def hold_a_conversation(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, ChatApp)
    screen = await ready(app, pilot)
    for number, question in enumerate(
        ["How do I reverse a list in Python?", "And without copying it?"], start=1
    ):
        await send(pilot, question)
        await turn_done(screen, pilot, 2 * number)
    app.set_focus(None)  # no cursor in the prompt box
    await pilot.pause()


@pytest.mark.parametrize("theme", ["kvchat-dark", "kvchat-light"])
def test_chat_screen(theme: str, snap_compare: Any) -> None:
    assert snap_compare(chat_app(theme), terminal_size=SIZE, run_before=hold_a_conversation)


def test_readme_screenshot_is_the_dark_snapshot() -> None:
    snapshot = SNAPSHOTS / "test_chat_screen[kvchat-dark].svg"
    assert README_SCREENSHOT.read_text(encoding="utf-8") == snapshot.read_text(encoding="utf-8"), (
        f"docs/screenshot.svg is out of date: cp '{snapshot}' {README_SCREENSHOT}"
    )
