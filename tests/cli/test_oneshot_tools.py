"""One-shot mode's `--json-schema FILE` and `--allow-tool SERVER.TOOL`:
the real demo model, and a published MCP server (mcp-server-time)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from chat.cli import oneshot
from chat.cli.oneshot import run_oneshot
from chat.cli.oneshot_tools import OneShotTools
from chat.engine import llama
from chat.engine.protocol import PromptProgress
from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.tools.config import parse_document
from chat.tools.permissions import Grant
from tests.engine.tool_models import OPENS_HERMES_CALL, qwen25_model
from tests.tools.test_time_server import time_server_command

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Tokyo"]},
        "population": {"type": "integer"},
    },
    "required": ["city", "population"],
}


def chat(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    for name in ("CONFIG", "DATA", "STATE", "CACHE"):
        env[f"KVCHAT_{name}_DIR"] = str(home / name.lower())
    return subprocess.run(
        [sys.executable, "-m", "chat", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_json_schema_makes_the_reply_valid_json(demo_model: Path, tmp_path: Path) -> None:
    schema_file = tmp_path / "city.json"
    schema_file.write_text(json.dumps(SCHEMA))
    result = chat(
        "-p", "Name a big city.", "--json-schema", str(schema_file),
        "--temperature", "0", "--max-tokens", "60", home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    jsonschema.validate(json.loads(result.stdout), SCHEMA)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot be opened: no such file"),
        ("{not json", "is not JSON (line 1, column 2"),
        ('{"type": 12}', "is not valid JSON Schema"),
        ('{"$ref": "https://example.com/s.json"}', "refers to another document"),
        ("[1, 2]", "not a JSON Schema object"),
    ],
)
def test_a_bad_schema_file_is_one_sentence_before_any_model_loads(
    tmp_path: Path, content: str | None, message: str
) -> None:
    schema_file = tmp_path / "schema.json"
    if content is not None:
        schema_file.write_text(content)
    result = chat("-p", "x", "--json-schema", str(schema_file), home=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and str(schema_file) in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--continue", "--json-schema", "s.json"), "go with -p"),
        (("-p", "x", "--allow-tool", "time"), "SERVER.TOOL"),
        (("-p", "x", "--allow-tool", "nope.tool"), "names the tool server 'nope'"),
        (("-p", "x", "--allow-tool", "a.b", "--json-schema", "s.json"), "cannot go together"),
        (("-p", "x", "--json-schema", "s.json", "--server", "http://127.0.0.1:9"), "model server"),
    ],
)
def test_option_mistakes_are_one_sentence(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = chat(*args, home=tmp_path)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr


def time_config(folder: Path) -> Path:
    document = {"mcpServers": {"time": {"command": str(time_server_command()), "args": []}}}
    path = folder / "mcp.json"
    path.write_text(json.dumps(document))
    return path


def test_a_model_that_cannot_call_tools_is_said_so(demo_model: Path, tmp_path: Path) -> None:
    config = time_config(tmp_path)
    result = chat(
        "-p", "x", "--mcp-config", str(config), "--allow-tool", "time.get_current_time",
        home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "cannot call tools" in result.stderr and "Traceback" not in result.stderr


class OnlyTool:
    """The real engine, offered one tool of those the turn offers (so that
    the demo model's call is known in advance), calling on its first reply
    and answering on the next."""

    def __init__(self, engine: Any, tool: str) -> None:
        self._engine = engine
        self._tool = tool
        self._grammars = [OPENS_HERMES_CALL, "root ::= [A-Z] [a-z ,.]{5,40}"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def stream_reply(self, *args: Any, tools: Any = (), **kwargs: Any) -> Iterator[Any]:
        self._engine.grammar = self._grammars.pop(0) if self._grammars else None
        chosen = [tool for tool in tools if tool.name == self._tool]
        yield from self._engine.stream_reply(*args, tools=chosen, **kwargs)


@pytest.fixture
def tool_model(demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`run_oneshot` loading the demo model behind Qwen 2.5's template, one
    tool offered (set `.tool`)."""
    path = qwen25_model(demo_model, tmp_path)
    real_load = llama.load_engine
    chosen = {"tool": ""}

    def load(*args: Any, **kwargs: Any) -> Any:
        return OnlyTool(real_load(*args, **kwargs), chosen["tool"])

    monkeypatch.setattr(llama, "load_engine", load)
    for name in ("CONFIG", "DATA", "STATE", "CACHE"):
        monkeypatch.setenv(f"KVCHAT_{name}_DIR", str(tmp_path / name.lower()))
    return path, chosen


def one_shot(path: Path, tmp_path: Path, grants: tuple[Grant, ...]) -> dict[str, Any]:
    settings = Settings()
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 200
    settings.model.n_ctx = 4096
    config = parse_document(time_config(tmp_path), json.loads(time_config(tmp_path).read_text()))
    out = io.StringIO()
    code = run_oneshot(
        "What time is it in Paris?",
        settings,
        ModelCandidate(path, path.stat().st_size, "test"),
        as_json=True,
        out=out,
        tools=OneShotTools(config, grants),
    )
    assert code == 0
    return json.loads(out.getvalue())


def test_an_allowed_tool_runs_and_the_model_answers(
    tool_model: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, chosen = tool_model
    chosen["tool"] = "get_current_time"
    read: list[PromptProgress] = []  # the progress line (drawn on a terminal only)
    monkeypatch.setattr(
        oneshot._ProgressLine, "update", lambda line, progress: read.append(progress)
    )
    data = one_shot(path, tmp_path, (Grant("time", "get_current_time"),))
    (call,) = data["tool_calls"]
    assert (call["server"], call["tool"], call["outcome"]) == ("time", "get_current_time", "ran")
    assert "timezone" in call["arguments"]
    assert data["reply"]
    # The reply after the call evaluated only the call and its result.
    first, second = data["steps"]
    assert first["prompt_evaluated"] == first["prompt_tokens"]
    assert second["prompt_evaluated"] <= second["prompt_tokens"] - first["prompt_tokens"]
    # Each step's prompt said how far it had been read (it said nothing with tools).
    assert [each.total for each in read if each.done == each.total] == [
        first["prompt_evaluated"],
        second["prompt_evaluated"],
    ]
    err = capsys.readouterr().err
    assert "chat: calling time.get_current_time {" in err
    assert "chat: time.get_current_time: " in err


def test_a_tool_not_allowed_is_refused_with_how_to_allow_it(
    tool_model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, chosen = tool_model
    chosen["tool"] = "convert_time"
    data = one_shot(path, tmp_path, (Grant("time", "get_current_time"),))
    (call,) = data["tool_calls"]
    assert (call["tool"], call["outcome"]) == ("convert_time", "refused")
    err = capsys.readouterr().err
    assert "the model called the tool 'convert_time' of the server 'time', which is not " in err
    assert "--allow-tool time.convert_time" in err
