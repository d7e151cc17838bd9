"""A home folder full of hostile things, and a hostile model server, for the
canary tests: every untrusted source kvchat reads carries the canary payload
(tests.security.canary), each with its own tag."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

from tests.engine.remote.fake_servers import FakeServer, openai_routes, serve
from tests.models.gguf_files import llama_fields, write_gguf
from tests.security.canary import payload
from tests.ui.app.quit_driver import folders_env

THEMES_FOLDER = Path(__file__).resolve().parents[2] / "themes"

TAGS = {
    "theme": "THEMENAME",
    "theme_description": "THEMEDESC",
    "preset": "PRESETNAME",
    "preset_description": "PRESETDESC",
    "preset_prompt": "PRESETPROMPT",
    "preset_file": "PRESETFILE",
    "title": "CONVTITLE",
    "user": "USERMSG",
    "reply": "SAVEDREPLY",
    "gguf_name": "GGUFNAME",
    "file_name": "FILENAME",
    "server_model": "SRVMODEL",
    "server_reply": "SRVREPLY",
    "paste": "PASTED",
    "tool_command": "TOOLCMD",
    "tool_key": "TOOLKEY",
    "tool_name": "TOOLNAME",
}


@dataclass
class HostileHome:
    folder: Path
    env: dict[str, str]
    server: FakeServer

    def chat(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "chat", *args]


def _hostile_theme(folder: Path) -> None:
    theme = tomllib_load(THEMES_FOLDER / "kvchat-dark.toml")
    theme["name"] = payload(TAGS["theme"])
    theme["description"] = payload(TAGS["theme_description"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hostile.toml").write_text(tomli_w.dumps(theme), encoding="utf-8")


def tomllib_load(path: Path) -> dict[str, object]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 only
        import tomli as tomllib
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _hostile_presets(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # Names and descriptions with controls are refused, and the warning quotes
    # the file's name: a hostile one.
    refused = {"name": payload("x"), "description": payload(TAGS["preset_description"])}
    (folder / f"{file_name(TAGS['preset_file'])}.toml").write_text(
        tomli_w.dumps(refused), encoding="utf-8"
    )
    # A system prompt may hold anything: it is shown in the settings pane.
    preset = {
        "name": f"hostile-{TAGS['preset']}",
        "description": "a plain description",
        "system_prompt": payload(TAGS["preset_prompt"]),
    }
    (folder / "hostile.toml").write_text(tomli_w.dumps(preset), encoding="utf-8")


def file_name(tag: str) -> str:
    """The payload as a file name may hold it: anything but "/" and NUL."""
    return payload(tag).replace("\x00", "").replace("/", "")[:200]


def _hostile_conversation(home: Path, env: dict[str, str]) -> None:
    source = home / "hostile.json"
    source.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": payload(TAGS["user"])},
                    {"role": "assistant", "content": payload(TAGS["reply"])},
                ],
                "kvchat": {"version": 1, "title": payload(TAGS["title"])},
            }
        ),
        encoding="utf-8",
    )
    subprocess.run(
        [sys.executable, "-m", "chat", "--import", str(source)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def _hostile_tool_servers(folder: Path) -> None:
    """mcp.json: a command (NULs refused, so without them), an unknown key and
    a server name that carry the payload; `--print-config` prints them."""
    command = payload(TAGS["tool_command"]).replace("\x00", "")
    entries = {
        "hostile": {"command": command, "args": [command], payload(TAGS["tool_key"]): 1},
        payload(TAGS["tool_name"]): {"command": "x"},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": entries}), encoding="utf-8")


def _hostile_models(folder: Path) -> None:
    name = f"{file_name(TAGS['file_name'])}.gguf"
    write_gguf(folder / name, llama_fields(**{"general.name": payload(TAGS["gguf_name"])}))


@pytest.fixture
def hostile_home(tmp_path: Path) -> Iterator[HostileHome]:
    env = folders_env(tmp_path)
    _hostile_theme(tmp_path / "config" / "themes")
    _hostile_presets(tmp_path / "config" / "presets")
    _hostile_tool_servers(tmp_path / "config")
    _hostile_models(tmp_path / "data" / "models")
    _hostile_conversation(tmp_path, env)
    server = serve(
        openai_routes(
            words=[payload(TAGS["server_reply"])],
            model_entry={"id": payload(TAGS["server_model"]), "object": "model"},
        )
    )
    try:
        yield HostileHome(tmp_path, env, server)
    finally:
        server.stop()
