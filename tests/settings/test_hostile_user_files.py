"""config.toml, theme and preset files that are not plain small files: each is
refused at once with one sentence, never waited on or read without end; a
linked config.toml is saved through its link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chat.settings.config_file import load_config, save_config, update_config
from chat.settings.presets import load_preset_file
from chat.settings.schema import Settings
from chat.settings.user_files import UserFileError
from tests.hostile_files import HOSTILE, hostile_file, returns_within, stdin_is_regular

WHY = {
    "fifo": "is a pipe (FIFO): only regular files are read",
    "dev-zero": "is a device: only regular files are read",
    "dev-stdin": "only regular files are read",
    "socket": "is a socket: only regular files are read",
    "link-loop": "cannot be opened: its links form a loop",
    "huge": "is larger than 1 MiB: not read",
}


def _skip_if_stdin_is_a_file(kind: str) -> None:
    if kind == "dev-stdin" and stdin_is_regular():
        pytest.skip("fd 0 is a regular file here: /dev/stdin is then a file like any other")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_config_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    _skip_if_stdin_is_a_file(kind)
    path = hostile_file(kind, tmp_path / "config.toml")
    settings, problems = returns_within(lambda: load_config(path))
    assert settings == Settings()
    assert len(problems) == 1
    assert str(problems[0]).startswith(f"{path}: ")
    assert str(problems[0]).endswith(f"{WHY[kind]}. Using the defaults.")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_preset_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    _skip_if_stdin_is_a_file(kind)
    path = hostile_file(kind, tmp_path / "mine.toml")
    with pytest.raises(UserFileError) as refused:
        returns_within(lambda: load_preset_file(path))
    [problem] = refused.value.problems
    assert problem.path == path and problem.detail.endswith(f"{WHY[kind]}.")


def test_a_dangling_config_link_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.symlink_to(tmp_path / "dotfiles" / "kvchat.toml")
    settings, problems = load_config(path)
    assert settings == Settings()
    assert [str(p) for p in problems] == [
        f"{path}: is a link to {tmp_path}/dotfiles/kvchat.toml, which does not exist. "
        "Using the defaults."
    ]


def test_a_missing_config_file_is_no_problem(tmp_path: Path) -> None:
    assert load_config(tmp_path / "config.toml") == (Settings(), [])


def test_saving_writes_through_a_linked_config_file(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "kvchat.toml"
    target.write_text("[sampling]\ntemperature = 0.5\n")
    target.chmod(0o640)
    link = tmp_path / "config" / "config.toml"
    link.parent.mkdir()
    link.symlink_to(target)

    update_config(link, "sampling.seed", 7)

    assert link.is_symlink() and os.readlink(link) == str(target)
    text = target.read_text()
    assert "temperature = 0.5" in text and "seed = 7" in text
    assert target.stat().st_mode & 0o777 == 0o640
    # The temporary file was made beside the target, and is gone.
    assert sorted(p.name for p in dotfiles.iterdir()) == ["kvchat.toml"]
    assert sorted(p.name for p in link.parent.iterdir()) == ["config.toml"]


def test_saving_through_a_chain_of_links_reaches_the_last_target(tmp_path: Path) -> None:
    target = tmp_path / "real.toml"
    target.write_text("")
    (tmp_path / "middle.toml").symlink_to(target)
    link = tmp_path / "config.toml"
    link.symlink_to(tmp_path / "middle.toml")
    settings = Settings()
    settings.sampling.seed = 3
    save_config(settings, link)
    assert link.is_symlink() and (tmp_path / "middle.toml").is_symlink()
    assert "seed = 3" in target.read_text()
