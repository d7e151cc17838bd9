"""kill -9 mid-reply, then reopen: the reply is marked interrupted, with the text
saved by then, on screen and in exports; while its window was alive it was not.
A real process (tests/ui/app/kill_driver.py) on the scripted engine, then on the
real demo model."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from chat import paths
from chat.cli.main import main as cli_main
from chat.conversations.conversation import Conversation
from chat.conversations.store import Store
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.message_view import AssistantMessageView
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import MODEL, header_of, rendered

REPO_ROOT = Path(__file__).resolve().parents[3]
NOTE = "cut short: kvchat ended before this reply was saved whole"


def saved_now() -> Conversation | None:
    """The newest conversation in the database, read by another connection."""
    if not paths.database_file().exists():
        return None
    with Store(paths.database_file()) as store:
        conv_id = store.latest_conversation_id()
        return None if conv_id is None else store.get_conversation(conv_id)


def poll_until(condition: Callable[[], object], timeout: float) -> None:
    """Wait for `condition()` outside the app (another process's database)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)  # a poll: the condition is checked again


def kill_mid_reply(tmp_path: Path, *model: str, words: int, timeout: float) -> Conversation:
    """Run the driver, kill -9 it once `words` words of its reply are saved (while
    it runs, the reply reads as being written), and return what was saved."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.ui.app.kill_driver", str(tmp_path / "streamed"), *model],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    alive: list[Conversation] = []

    def reply_saved() -> bool:
        assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
        conv = saved_now()
        if conv is None or len(conv.messages) < 2:
            return False
        alive.append(conv)
        return len(conv.messages[1].content.split()) >= words

    try:
        poll_until(reply_saved, timeout)
    finally:
        process.kill()
        process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    assert alive[-1].messages[1].state == "writing"  # its window was alive then
    conv = saved_now()
    assert conv is not None
    return conv


async def reopened_reply(conv_id: int) -> tuple[str, str, bool]:
    """Reopen the conversation in the app: the reply's header, its text on
    screen, and whether the header is drawn as a warning."""
    app = ChatApp(
        Launch(Settings(), MODEL, resume=conv_id),
        engine_factory=scripted_factory(ScriptedEngine()),
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.chat_screen.conversation.id == conv_id, pilot)
        await wait_for(lambda: bool(app.query(AssistantMessageView)), pilot)
        view = app.query_one(AssistantMessageView)

        # The tokens are counted once the model is ready, after the view is drawn.
        await wait_for(lambda: " token" in header_of(view), pilot)
        warning = view.query_one(".message-header").has_class("ended-early")
        return header_of(view), rendered(view.body), warning


async def test_kill_9_mid_reply_is_marked_interrupted_when_reopened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = kill_mid_reply(tmp_path, words=20, timeout=30)
    user, reply = conv.messages
    assert (user.content, reply.state, reply.stats) == ("Count slowly", "interrupted", None)
    assert reply.content.startswith("0 1 2 3 ")  # the text saved by then is kept

    assert conv.id is not None
    header, text, warning = await reopened_reply(conv.id)
    # Its tokens counted (it is sent with the next turn), no reply figures.
    assert re.fullmatch(rf"Assistant · [\d,]+ tokens · \[{NOTE}\]", header), header
    assert warning and text.strip() == reply.content.strip()

    assert cli_main(["--export", str(conv.id)]) == 0
    exported = capsys.readouterr().out
    assert f"{reply.content}\n\n*{NOTE}*" in exported


@pytest.mark.model
def test_real_model_kill_9_mid_reply_is_marked_interrupted(
    demo_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = kill_mid_reply(tmp_path, str(demo_model), words=5, timeout=120)
    user, reply = conv.messages
    assert user.content.startswith("Count from 1 to 1000")
    assert reply.state == "interrupted" and reply.stats is None
    assert len(reply.content.split()) >= 5
    assert cli_main(["--export", str(conv.id)]) == 0
    assert f"*{NOTE}*" in capsys.readouterr().out
