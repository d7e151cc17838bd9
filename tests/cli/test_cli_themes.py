"""`chat --theme NAME` and `chat --list-themes`, run as the user runs them."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from chat import paths
from chat.cli import main as cli
from chat.ui.app import ChatApp
from chat.ui.themes import DEFAULT_THEME, load_themes
from tests.conftest import good_document, run_chat, write


def chat(*args: str) -> subprocess.CompletedProcess[str]:
    return run_chat(*args, timeout=60)


BUILTINS = load_themes(Path("/nonexistent/kvchat-user-themes"))[0]


def test_unknown_theme_is_a_usage_error_listing_the_names() -> None:
    result = chat("--theme", "nope")
    assert result.returncode == 2
    assert result.stdout == ""
    names = ", ".join(theme.name for theme in BUILTINS)
    assert result.stderr == f"chat: There is no theme called 'nope'; the themes are: {names}.\n"
    assert not paths.config_file().exists()


def test_unknown_theme_also_names_bad_user_theme_files() -> None:
    document = good_document("mine")
    document["primary"] = "blurple"
    bad = write(paths.user_themes_dir(), "mine.toml", document)
    result = chat("--theme", "mine")
    assert result.returncode == 2
    warning, error = result.stderr.splitlines()
    assert warning == (
        f"chat: warning: skipped theme file {bad}: field 'primary': "
        "'blurple' is not a colour (use #rrggbb or a colour name)."
    )
    assert error.startswith("chat: There is no theme called 'mine'; the themes are: kvchat-dark")


def test_theme_flag_is_for_this_run_only() -> None:
    result = chat("--theme", "kvchat-light", "--print-config")
    assert result.returncode == 0, result.stderr
    assert 'theme = "kvchat-light"  # from --theme' in result.stdout
    assert not paths.config_file().exists()


def theme_lines(output: str) -> list[str]:
    """The list itself: the lines before the blank line and the notes."""
    return output.split("\n\n", 1)[0].splitlines()


def test_list_themes() -> None:
    mine = write(paths.user_themes_dir(), "mine.toml", good_document("mine", dark=False))
    broken = write(paths.user_themes_dir(), "broken.toml", "name = \n")
    result = chat("--list-themes")
    assert result.returncode == 0, result.stderr
    lines = theme_lines(result.stdout)
    assert [line[2:].split()[0] for line in lines] == [*(theme.name for theme in BUILTINS), "mine"]
    for theme, line in zip(BUILTINS, lines[:-1], strict=True):
        mode = "dark" if theme.dark else "light"
        assert f"  {mode} " in line and theme.description in line
    assert lines[0].startswith(f"* {DEFAULT_THEME} ") and lines[0].endswith("(default)")
    assert [line[0] for line in lines].count("*") == 1
    mine_line = lines[-1]
    assert "light" in mine_line and f"(your theme: {mine})" in mine_line
    assert str(paths.user_themes_dir()) in result.stdout
    assert "--theme NAME" in result.stdout and "Ctrl+P" in result.stdout
    warning = f"chat: warning: skipped theme file {broken}: is not valid TOML"
    assert result.stderr.startswith(warning)


def test_list_themes_marks_the_configured_theme() -> None:
    paths.config_file().parent.mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text('[ui]\ntheme = "kvchat-sand"\n')
    result = chat("--list-themes")
    starred = [line for line in theme_lines(result.stdout) if line.startswith("* ")]
    assert len(starred) == 1 and starred[0].startswith("* kvchat-sand ")
    result = chat("--list-themes", "--theme", "kvchat-nord")
    starred = [line for line in theme_lines(result.stdout) if line.startswith("* ")]
    assert len(starred) == 1 and starred[0].startswith("* kvchat-nord ")


def test_list_themes_with_an_unknown_configured_theme() -> None:
    paths.config_file().parent.mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text('[ui]\ntheme = "dracula"\n')
    result = chat("--list-themes")
    assert result.returncode == 0
    starred = [line for line in theme_lines(result.stdout) if line.startswith("* ")]
    assert len(starred) == 1 and starred[0].startswith(f"* {DEFAULT_THEME} ")
    assert result.stderr.startswith("chat: warning: There is no theme called 'dracula'")
    assert result.stderr.endswith(f"chat starts with {DEFAULT_THEME}.\n")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_app_gets_the_theme_and_where_to_save_it(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[ChatApp] = []
    monkeypatch.setattr(ChatApp, "run", lambda app: started.append(app))
    monkeypatch.setattr(sys, "stdin", FakeTerminal())
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # the app draws on a terminal
    assert cli.main(["--theme", "kvchat-light", "--model", str(Path(__file__))]) == 2  # not GGUF
    assert cli.main(["--theme", "kvchat-light"]) == 0
    (app,) = started
    assert app.theme == "kvchat-light"
    assert app.config_path == paths.config_file()
