"""`--mcp-config FILE` and the tool servers in `--print-config`: what a user
sees of the tool server file before any server runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat import paths
from chat.cli import main as cli


def test_print_config_lists_the_servers_of_the_file_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "servers.json"
    file.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
                    "notes": {
                        "url": "http://127.0.0.1:8000/mcp",
                        "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                        "alwaysAllow": ["search"],
                    },
                    "broken": {"command": 3},
                }
            }
        )
    )
    assert cli.main(["--mcp-config", str(file), "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith(
        f"# Tool servers (MCP), from {file}:\n"
        "#   time: stdio: mcp-server-time --local-timezone UTC\n"
        "#   notes: http: http://127.0.0.1:8000/mcp "
        "(headers: Authorization; always allowed: search)\n"
    )
    assert "NOTES_TOKEN" not in out  # names of headers only, never their values
    assert err == (
        f"chat: warning: {file}: server 'broken': 'command' is a number, not a string; "
        "it is left out.\n"
    )


def test_without_the_option_the_config_folder_file_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--print-config"]) == 0
    assert capsys.readouterr().out.endswith(
        f"# Tool servers (MCP), from {paths.mcp_config_file()}:\n"
        "#   (none: the file does not exist)\n"
    )


def test_a_file_given_that_cannot_be_read_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "servers.json"
    file.write_text("{oops")
    assert cli.main(["--mcp-config", str(file), "--print-config"]) == 2
    assert capsys.readouterr().err == (
        f"chat: The tool server file {file} is not JSON (line 1, column 2: "
        "Expecting property name enclosed in double quotes).\n"
    )
    assert cli.main(["--mcp-config", str(tmp_path / "missing.json"), "--print-config"]) == 2
    assert "cannot be opened: no such file or directory." in capsys.readouterr().err
