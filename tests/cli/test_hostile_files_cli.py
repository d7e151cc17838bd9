"""The `chat` command, run for real, when its files are FIFOs, devices or
links to them: it says so in one sentence on stderr and goes on (a config,
theme or preset file is skipped) or stops with exit 2 (a file to import),
and never waits on a FIFO or reads a device without end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chat import paths
from tests.conftest import run_chat
from tests.hostile_files import hostile_file


def chat(*args: str) -> subprocess.CompletedProcess[str]:
    return run_chat(*args, timeout=60)  # a FIFO opened for reading would block forever


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("fifo", "is a pipe (FIFO): only regular files are read"),
        ("dev-zero", "is a device: only regular files are read"),
        ("huge", "is larger than 1 MiB: not read"),
    ],
)
def test_a_hostile_config_file_is_a_warning_and_the_defaults_are_used(kind: str, why: str) -> None:
    config = paths.config_file()
    config.parent.mkdir(parents=True, exist_ok=True)
    hostile_file(kind, config)
    result = chat("--print-config")
    assert result.returncode == 0, result.stderr
    assert f"{config}: {why}. Using the defaults." in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_dangling_config_link_is_said(tmp_path: Path) -> None:
    config = paths.config_file()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.symlink_to(tmp_path / "dotfiles" / "kvchat.toml")
    result = chat("--print-config")
    assert result.returncode == 0
    assert (
        f"{config}: is a link to {tmp_path}/dotfiles/kvchat.toml, which does not exist. "
        "Using the defaults." in result.stderr
    )


def test_a_fifo_theme_file_is_skipped_with_a_warning() -> None:
    folder = paths.user_themes_dir()
    folder.mkdir(parents=True)
    theme = hostile_file("fifo", folder / "mine.toml")
    result = chat("--list-themes")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"chat: warning: skipped theme file {theme}: "
        "is a pipe (FIFO): only regular files are read.\n"
    )
    assert "kvchat-dark" in result.stdout


def test_a_preset_linked_to_dev_zero_is_skipped_with_a_warning() -> None:
    folder = paths.user_presets_dir()
    folder.mkdir(parents=True)
    preset = hostile_file("dev-zero", folder / "mine.toml")
    result = chat("--list-presets")
    assert result.returncode == 0, result.stderr
    assert f"{preset}: is a device: only regular files are read." in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-loop"])
def test_importing_a_hostile_file_stops_with_exit_2(tmp_path: Path, kind: str) -> None:
    path = hostile_file(kind, tmp_path / "chat.json")
    result = chat("--import", str(path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"chat: Cannot import {path}: it ")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
