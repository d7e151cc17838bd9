"""Runs the chat app in the terminal it was started in, as `chat` does (not
headless: Textual's terminal driver reads and parses the keys), with a scripted
model. The typing tests (test_typing) drive it through a pseudo-terminal.

Usage: python -m tests.ui.app.typing_driver RESULT_FILE [MESSAGES [TOKENIZE_S]]

MESSAGES: open a conversation of that many messages at start. TOKENIZE_S: the
seconds the scripted tokenizer spends on each call, in Python, holding the GIL
as a real chat template does. When the app has quit, RESULT_FILE gets JSON:
the prompt box's text, and the last message of each prompt the model was sent.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from textual.pilot import Pilot

from chat.conversations.conversation import Conversation, Message
from chat.engine.protocol import ChatMessages
from chat.engine.tool_calls.calls import ToolDefinition
from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.app.quit_driver import Terminal, folders_env


class SlowTokenizer(ScriptedEngine):
    """Counts as the scripted engine does, spending `seconds` of Python on each call."""

    def __init__(self, seconds: float) -> None:
        super().__init__(replies=[["Noted."]])
        self.seconds = seconds
        self.slow_threads: list[str] = []
        """The thread each slow call ran on."""

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        if self.seconds:
            self.slow_threads.append(threading.current_thread().name)
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return super().tokenize_chat(messages, add_generation_prompt)


def big_conversation(messages: int) -> Conversation:
    roles = ("user", "assistant")
    return Conversation(
        messages=[Message(roles[i % 2], f"Message {i}: hello there.") for i in range(messages)]
    )


@dataclass
class Typed:
    """This driver started in a pseudo-terminal, and the file it writes at the end."""

    terminal: Terminal
    result: Path

    def outcome(self) -> dict[str, object]:
        """What the app held when it quit (see `main`)."""
        return dict(json.loads(self.result.read_text(encoding="utf-8")))


def start_typing_driver(home: Path, env: dict[str, str] | None = None) -> Typed:
    """The app with a scripted model in a pseudo-terminal, just started
    (`env`: its environment, else `folders_env(home)`)."""
    result = home / "result.json"
    terminal = Terminal(
        [sys.executable, "-m", "tests.ui.app.typing_driver", str(result)],
        folders_env(home) if env is None else env,
        (120, 40),
    )
    return Typed(terminal, result)


def main(argv: Sequence[str]) -> None:
    result = Path(argv[0])
    messages = int(argv[1]) if len(argv) > 1 else 0
    seconds = float(argv[2]) if len(argv) > 2 else 0.0
    engine = SlowTokenizer(seconds)
    app = ChatApp(
        Launch(Settings(), ModelCandidate(engine.info.path, 1, "test")),
        engine_factory=scripted_factory(engine),
    )
    boxes: list[PromptBox] = []

    async def setup(pilot: Pilot[None]) -> None:
        # The box is mounted with the draft, just after the screen's first widgets.
        await wait_for(lambda: app.query(PromptBox), pilot, 30)
        boxes.append(app.query_one(PromptBox))
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, 30)
        if messages:
            await app.chat_screen.open_conversation(big_conversation(messages))
        # Then the test types, and quits (Textual waits for this to return).

    app.run(auto_pilot=setup)
    sent = [call[0][-1]["content"] for call in engine.calls]
    text = boxes[0].text if boxes else None
    result.write_text(json.dumps({"box": text, "sent": sent}), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
