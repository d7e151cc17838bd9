"""The command line with kvchat's folders broken (cannot be created, read-only,
full): `chat -p` still answers, the conversation commands fail with one
sentence naming the folder, and no traceback ever reaches the terminal. Real
subprocesses, real filesystem faults (tests/faults.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from tests.faults import Fault

FAULTS = ["uncreatable_folder", "read_only_folder", "full_folder"]


def chat(
    *args: str, stdout: int | None = None, **folders: Path
) -> subprocess.CompletedProcess[str]:
    """Run `chat ARGS` with KVCHAT_<NAME>_DIR set for each of `folders`."""
    env = dict(os.environ)
    env.update({f"KVCHAT_{name.upper()}_DIR": str(path) for name, path in folders.items()})
    return subprocess.run(
        [sys.executable, "-m", "chat", *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize("fault_name", FAULTS)
def test_one_shot_answers_with_every_folder_broken(
    demo_model: Path, request: pytest.FixtureRequest, fault_name: str
) -> None:
    fault: Fault = request.getfixturevalue(fault_name)
    folder = fault.folder
    result = chat("-p", "Say hi.", "--max-tokens", "8", config=folder, data=folder, state=folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr
    # One line about the log, naming its folder; the reply needs no other folder.
    log_lines = [line for line in result.stderr.splitlines() if "llama.cpp's log" in line]
    assert len(log_lines) == 1
    assert log_lines[0].startswith("chat: warning: llama.cpp's log is not being written: ")
    assert str(folder) in log_lines[0]


@pytest.mark.parametrize("fault_name", FAULTS)
@pytest.mark.parametrize("command", [["--list"], ["--export", "1"], ["--import", "IMPORT"]])
def test_conversation_commands_fail_in_one_sentence_naming_the_folder(
    request: pytest.FixtureRequest, tmp_path: Path, fault_name: str, command: list[str]
) -> None:
    fault: Fault = request.getfixturevalue(fault_name)
    conversation = tmp_path / "conversation.json"
    conversation.write_text('{"messages": [{"role": "user", "content": "hello"}]}')
    args = [str(conversation) if arg == "IMPORT" else arg for arg in command]
    result = chat(*args, data=fault.folder)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("chat: ") and result.stderr.count("\n") == 1
    assert str(fault.folder) in result.stderr


@pytest.mark.parametrize("command", [["--export", "1"], ["-p", "Say hi.", "--max-tokens", "8"]])
def test_output_to_a_full_disk_is_one_sentence(
    demo_model: Path, full_folder: Fault, tmp_path: Path, command: list[str]
) -> None:
    if not full_folder.real:
        pytest.skip("needs a real full disk (a small tmpfs): this machine cannot mount one")
    data = tmp_path / "data"
    with Store(data / "conversations.db") as store:
        store.create_conversation(
            Conversation(messages=[Message("user", "hello"), Message("assistant", "hi " * 5000)])
        )
    with (full_folder.folder / "out.txt").open("w") as out:
        result = chat(*command, stdout=out.fileno(), data=data)
    assert result.returncode == 1
    assert result.stderr.endswith("chat: cannot write the output: No space left on device.\n")
    assert "Traceback" not in result.stderr
