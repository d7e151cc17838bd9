"""The command line and the config file, end to end in subprocesses: the flags
for common settings, `--config`, `--print-config` with sources, and a bad
config file that is reported but never stops the app or one-shot mode.

Every subprocess gets its own KVCHAT_CONFIG_DIR and KVCHAT_DATA_DIR (from the
autouse fixture in conftest.py, which sets them in os.environ)."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from chat import paths
from tests.conftest import run_chat

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


chat = run_chat


def write_config(text: str | bytes, path: Path | None = None) -> Path:
    path = path or paths.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def effective(stdout: str) -> dict[str, dict[str, object]]:
    return tomllib.loads(stdout)


def test_print_config_shows_each_value_and_where_it_came_from() -> None:
    path = write_config("[sampling]\ntemperature = 0.5\ntop_k = 12\n")
    result = chat("--print-config", "--top-p", "0.5", env={"KVCHAT_TEMPERATURE": "0.25"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert f"# Config file: {path}" in out
    assert "temperature = 0.25  # from KVCHAT_TEMPERATURE" in out  # env over file
    assert "top_k = 12  # from config file" in out
    assert "top_p = 0.5  # from --top-p" in out
    assert "min_p = 0.05  # default" in out
    values = effective(out)
    assert values["sampling"]["temperature"] == 0.25


def test_every_setting_flag_reaches_the_settings() -> None:
    result = chat(
        "--print-config",
        "--temperature",
        "0.3",
        "--top-p",
        "0.7",
        "--seed",
        "42",
        "--ctx",
        "1024",
        "--gpu-layers",
        "0",
        "--max-tokens",
        "99",
        "--system",
        "Be brief.",
    )
    assert result.returncode == 0, result.stderr
    values = effective(result.stdout)
    assert values["sampling"] == {
        **values["sampling"],
        "temperature": 0.3,
        "top_p": 0.7,
        "seed": 42,
        "max_tokens": 99,
    }
    assert values["model"]["n_ctx"] == 1024 and values["model"]["n_gpu_layers"] == 0
    assert values["chat"]["system_prompt"] == "Be brief."
    for flag in ("--temperature", "--top-p", "--seed", "--ctx", "--gpu-layers", "--max-tokens"):
        assert f"# from {flag}" in result.stdout
    # A flag wins over the environment.
    result = chat("--print-config", "--seed", "7", env={"KVCHAT_SEED": "8"})
    assert effective(result.stdout)["sampling"]["seed"] == 7


def test_seed_random_from_the_command_line() -> None:
    write_config("[sampling]\nseed = 5\n")
    result = chat("--print-config", "--seed", "random")
    assert "# seed = (random)  # from --seed" in result.stdout


def test_config_flag_uses_another_file(tmp_path: Path) -> None:
    other = write_config("[sampling]\ntop_k = 3\n", tmp_path / "elsewhere.toml")
    write_config("[sampling]\ntop_k = 9\n")
    result = chat("--config", str(other), "--print-config")
    assert result.returncode == 0
    assert f"# Config file: {other}" in result.stdout
    assert effective(result.stdout)["sampling"]["top_k"] == 3


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # The flag the user typed is named, not the setting's key in the config file.
        (["--ctx", "100"], "chat: --ctx 100 is out of range: allowed 0 = the model's own window"),
        (["--max-tokens", "0"], "chat: --max-tokens 0 is out of range: allowed 1 – 131072."),
        (["--temperature", "hot"], 'chat: --temperature "hot" is not a number: allowed 0 – 5.'),
        (["--seed", "-3"], "chat: --seed -3 is out of range: allowed blank = random"),
    ],
)
def test_bad_flag_value_is_a_usage_error_naming_the_flag(flags: list[str], said: str) -> None:
    result = chat("--print-config", *flags)
    assert result.returncode == 2
    assert result.stderr.startswith(said)
    assert "Traceback" not in result.stderr and "model.n_ctx" not in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[sampling]\ntemperature = = 1\n", "line 2"),
        ("[sampling]\ntemperature = 9\ntop_k = 12\n", "sampling.temperature = 9 is out of range"),
        ("[sampling]\ntemprature = 0.5\n", "sampling.temprature is not a setting"),
        ('[model]\nn_ctx = "big"\n', "model.n_ctx"),
        (b"[chat]\nsystem_prompt = '\xff'\n", "is not UTF-8"),
    ],
    ids=["syntax", "out-of-range", "unknown-key", "wrong-type", "not-utf8"],
)
def test_bad_config_is_reported_and_print_config_still_runs(
    text: str | bytes, expected: str
) -> None:
    path = write_config(text)
    before = path.read_bytes()
    result = chat("--print-config")
    assert result.returncode == 0
    assert f"chat: warning: {path}" in result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert "[sampling]" in result.stdout
    assert path.read_bytes() == before  # reading never rewrites the user's file


def test_bad_environment_variable_is_reported() -> None:
    result = chat("--print-config", env={"KVCHAT_TEMPERATURE": "hot"})
    assert result.returncode == 0
    assert "KVCHAT_TEMPERATURE" in result.stderr and "not a number" in result.stderr


@pytest.mark.model
def test_bad_config_one_shot_still_runs(demo_model: Path) -> None:
    path = write_config("[sampling]\ntemperature = 9\n[nonsense]\nx = 1\n")
    result = chat("-p", "Say hi.", "--temperature", "0", "--max-tokens", "12")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert f"chat: warning: {path}, line 2" in result.stderr
    assert "[nonsense] is not a section" in result.stderr


@pytest.mark.model
def test_bad_config_app_starts_and_quits(demo_model: Path) -> None:
    """The TUI in a real terminal (a pty): it draws, shows the problem, quits on Ctrl+Q."""
    path = write_config("[sampling]\ntemperature = = 1\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the app, in a 120x40 terminal
        os.environ.update({"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"})
        os.execv(sys.executable, [sys.executable, "-m", "chat"])
    output = b""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"TOML" not in output:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    output += os.read(fd, 65536)
                except OSError:
                    break
        assert b"TOML" in output, output[-2000:]
        os.write(fd, b"\x11")  # Ctrl+Q
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                with contextlib.suppress(OSError):
                    os.read(fd, 65536)
        else:
            raise AssertionError("the app did not quit on Ctrl+Q")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    assert path.read_text() == "[sampling]\ntemperature = = 1\n"
