"""Runs the chat app headless with a slow scripted engine, sends one message and
waits to be killed: the `kill -9` test in test_conversations_browser drives it.

Usage: python -m tests.ui.app.kill_driver SIDE_FILE [MODEL]

With MODEL (a GGUF file), the real model replies instead, at length, and
SIDE_FILE stays empty: the test reads what was saved from the database.

Every piece of text the engine streams is appended to SIDE_FILE as a JSON line
`[time, text]` the moment it is produced, so the test can compare what was
streamed with what reached the database (KVCHAT_DATA_DIR says where).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from textual.pilot import Pilot

from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory

MESSAGE = "Count slowly"
REAL_MODEL_MESSAGE = "Count from 1 to 1000, one number per line."


def logging_engine(log: TextIO) -> ScriptedEngine:
    """Writes each token's text, with the time, to `log` as it is generated."""

    def write(text: str) -> None:
        log.write(json.dumps([time.time(), text]) + "\n")
        log.flush()

    # A model generating 100 tokens a second (simulated) for a minute: still
    # streaming when the test kills us.
    return ScriptedEngine(replies=[[f"{i} " for i in range(6000)]], delay=0.01, on_token=write)


async def send_and_wait(pilot: Pilot[object], message: str = MESSAGE) -> None:
    app = pilot.app
    assert isinstance(app, ChatApp)
    # Sent once there is a model to reply and a database to save to.
    await wait_for(lambda: app.chat_screen.engine is not None and app.store is not None, pilot, 30)
    app.query_one(PromptBox).insert(message)
    await pilot.press("enter")
    await asyncio.Event().wait()  # until killed


def real_model_app(path: Path) -> ChatApp:
    settings = Settings()
    settings.sampling.temperature = 0
    settings.sampling.max_tokens = 4000  # still writing when the test kills us
    return ChatApp(Launch(settings, ModelCandidate(path, path.stat().st_size, "test")))


def main() -> None:
    with open(Path(sys.argv[1]), "a", encoding="utf-8") as log:
        if len(sys.argv) > 2:
            app = real_model_app(Path(sys.argv[2]))
            app.run(
                headless=True,
                size=(100, 30),
                auto_pilot=lambda pilot: send_and_wait(pilot, REAL_MODEL_MESSAGE),
            )
            return
        engine = logging_engine(log)
        model = ModelCandidate(engine.info.path, 1, "test")
        app = ChatApp(Launch(Settings(), model), engine_factory=scripted_factory(engine))
        app.run(headless=True, size=(100, 30), auto_pilot=send_and_wait)


if __name__ == "__main__":
    main()
