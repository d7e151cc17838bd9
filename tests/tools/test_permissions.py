"""Whether a tool may run: nothing by default, the choices that last saved
and taken back, a file that cannot be read left as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat.errors import ConfigError
from chat.tools.config import StdioServerConfig
from chat.tools.permissions import Choice, Grant, Permissions, parse_allow_tool


def test_nothing_is_allowed_by_default(tmp_path: Path) -> None:
    permissions = Permissions(tmp_path / "p.json")
    assert permissions.allowed("time", "get_current_time") is None
    assert permissions.lasting() == []


def test_once_and_refuse_leave_nothing_behind(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    permissions = Permissions(file)
    permissions.record(Choice.ONCE, "time", "get_current_time")
    permissions.record(Choice.REFUSE, "time", "get_current_time")
    assert permissions.allowed("time", "get_current_time") is None
    assert not file.exists()


def test_lasting_choices_are_saved_listed_and_taken_back(tmp_path: Path) -> None:
    file = tmp_path / "data" / "p.json"
    permissions = Permissions(file)
    permissions.record(Choice.TOOL, "time", "get_current_time")
    permissions.record(Choice.SERVER, "notes", "search")
    assert permissions.allowed("time", "get_current_time") is not None
    assert permissions.allowed("time", "convert_time") is None  # that tool only
    assert permissions.allowed("notes", "anything") is not None
    again = Permissions(file)  # a later run reads them back
    assert again.lasting() == [Grant("notes"), Grant("time", "get_current_time")]
    assert again.revoke(Grant("notes"))
    assert not again.revoke(Grant("notes"))
    assert Permissions(file).lasting() == [Grant("time", "get_current_time")]
    # Written whole, then renamed: no temporary file is left beside it.
    assert [p.name for p in file.parent.iterdir()] == ["p.json"]


def test_the_config_and_the_command_line_allow_beforehand(tmp_path: Path) -> None:
    server = StdioServerConfig("time", "mcp-server-time", always_allow=("get_current_time",))
    permissions = Permissions.from_config([server], [Grant("git", None)], tmp_path / "p.json")
    assert permissions.allowed("time", "get_current_time") is not None
    assert permissions.allowed("time", "convert_time") is None
    assert permissions.allowed("git", "git_status") is not None
    assert permissions.lasting() == []  # not saved: they hold for the run


def test_without_a_file_lasting_choices_hold_for_the_run_only(tmp_path: Path) -> None:
    permissions = Permissions(None)
    permissions.record(Choice.TOOL, "time", "get_current_time")
    assert permissions.allowed("time", "get_current_time") is not None
    assert permissions.lasting() == [Grant("time", "get_current_time")]


@pytest.mark.parametrize("text", ["{not json", '{"allowed": "all"}', "[1]"])
def test_a_file_that_cannot_be_read_is_left_as_it_is(tmp_path: Path, text: str) -> None:
    file = tmp_path / "p.json"
    file.write_text(text)
    permissions = Permissions(file)
    assert permissions.problem is not None and str(file) in permissions.problem
    assert permissions.allowed("time", "x") is None
    permissions.record(Choice.SERVER, "time", "x")
    assert permissions.allowed("time", "x") is not None  # for this run
    assert file.read_text() == text  # never overwritten


def test_a_file_that_cannot_be_written_says_so_and_the_choice_holds(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    permissions = Permissions(blocker / "p.json")
    with pytest.raises(ConfigError, match="Cannot save the tool permissions"):
        permissions.record(Choice.TOOL, "time", "x")
    assert permissions.allowed("time", "x") is not None


def test_the_saved_file_is_plain_json(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    Permissions(file).record(Choice.TOOL, "time", "get_current_time")
    assert json.loads(file.read_text()) == {
        "version": 1,
        "allowed": [{"server": "time", "tool": "get_current_time"}],
    }


def test_allow_tool_names_a_server_and_a_tool() -> None:
    assert parse_allow_tool("time.get_current_time") == Grant("time", "get_current_time")
    assert parse_allow_tool("time.*") == Grant("time")
    for bad in ("time", ".x", "time.", ""):
        with pytest.raises(ConfigError, match=r"SERVER\.TOOL"):
            parse_allow_tool(bad)
