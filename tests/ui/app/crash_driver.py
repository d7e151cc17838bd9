"""Runs the chat app in the terminal it was started in, as `chat` does, with a
scripted model and one action broken on purpose: Ctrl+N raises an error that
nothing handles. test_crash_report drives it through a pseudo-terminal.

Usage: python -m tests.ui.app.crash_driver
Exits with the app's return code.
"""

from __future__ import annotations

import sys

from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from tests.fakes import ScriptedEngine, scripted_factory

BROKEN = "broken on purpose \x1b[31m[bold]red?[/bold]"
"""The error's message: escapes and markup, which must reach the screen as text."""


async def broken_new_conversation(_screen: ChatScreen) -> None:
    raise RuntimeError(BROKEN)


def main() -> int:
    engine = ScriptedEngine()
    ChatScreen.action_new_conversation = broken_new_conversation  # type: ignore[assignment,method-assign]
    app = ChatApp(
        Launch(Settings(), ModelCandidate(engine.info.path, 1, "test")),
        engine_factory=scripted_factory(engine),
    )
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
