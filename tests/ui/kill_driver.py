"""Runs the chat app headless with a slow scripted engine, sends one message and
waits to be killed: the `kill -9` test in test_conversations_browser drives it.

Usage: python -m tests.ui.kill_driver SIDE_FILE

Every piece of text the engine streams is appended to SIDE_FILE as a JSON line
`[time, text]` the moment it is produced, so the test can compare what was
streamed with what reached the database (KVCHAT_DATA_DIR says where).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from textual.pilot import Pilot

from chat.engine.base import ChatMessages, EngineEvent, TokenEvent
from chat.model_files import ModelCandidate
from chat.settings.schema import SamplingSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory

MESSAGE = "Count slowly"


class LoggingEngine(ScriptedEngine):
    def __init__(self, log: TextIO) -> None:
        # A model generating 100 tokens a second (simulated) for a minute: still
        # streaming when the test kills us.
        super().__init__(replies=[[f"{i} " for i in range(6000)]], delay=0.01)
        self.log = log

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
    ) -> Iterator[EngineEvent]:
        for event in super().stream_reply(messages, sampling, cancel, record_probs):
            if isinstance(event, TokenEvent) and event.text:
                self.log.write(json.dumps([time.time(), event.text]) + "\n")
                self.log.flush()
            yield event


async def send_and_wait(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, ChatApp)
    # Sent once there is a model to reply and a database to save to.
    await wait_for(lambda: app.chat_screen.engine is not None and app.store is not None, pilot, 30)
    app.query_one(PromptBox).insert(MESSAGE)
    await pilot.press("enter")
    await asyncio.Event().wait()  # until killed


def main() -> None:
    with open(Path(sys.argv[1]), "a", encoding="utf-8") as log:
        engine = LoggingEngine(log)
        model = ModelCandidate(engine.info.path, 1, "test")
        app = ChatApp(Launch(Settings(), model), engine_factory=scripted_factory(engine))
        app.run(headless=True, size=(100, 30), auto_pilot=send_and_wait)


if __name__ == "__main__":
    main()
