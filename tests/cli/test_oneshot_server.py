"""`chat -p` with a model server (issue 17): the flags, their precedence, the
reply streamed from the server's engine, the JSON naming the server, and
errors as one sentence. The engine is a scripted stand-in put where one-shot
mode gets it (`chat.engine.remote.connect`); the API key never shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chat import paths
from chat.cli import main as cli
from chat.conversations.conversation import ReplyStats
from chat.engine import remote
from chat.engine.protocol import EngineEvent, Finished, TokenEvent
from chat.engine.remote import ServerConfig
from chat.errors import ServerUnreachableError
from chat.settings.schema import SamplingSettings
from tests.conftest import run_chat
from tests.engine.remote.fake_servers import RawServer, Reply, openai_routes, serve
from tests.fakes import ScriptedEngine
from tests.servers import RunningServer, llama_server

KEY = "sk-test-0123456789abcdef"  # made up; must never be printed


def served(engine: ScriptedEngine) -> ScriptedEngine:
    """`engine` as a model server's engine reports itself."""
    engine.info = replace(engine.info, kind="llama-server", server_url="http://h:1")
    return engine


class Connections:
    """Stands in for `chat.engine.remote.connect`: records each ServerConfig and
    returns `engine` (or raises `error`)."""

    def __init__(
        self, engine: ScriptedEngine | None = None, error: Exception | None = None
    ) -> None:
        self.engine = engine if engine is not None else served(ScriptedEngine())
        self.error = error
        self.configs: list[ServerConfig] = []

    def __call__(self, config: ServerConfig) -> object:
        self.configs.append(config)
        if self.error is not None:
            raise self.error
        return self.engine


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> Connections:
    connections = Connections()
    monkeypatch.setattr(remote, "connect", connections)
    return connections


def run(*args: str) -> int:
    return cli.main(list(args))


def test_a_reply_streams_from_the_server(
    connect: Connections, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    status = run(
        "-p",
        "hi",
        "--server",
        "http://127.0.0.1:8080/v1",
        "--server-kind",
        "llama-server",
        "--server-model",
        "qwen",
        "--api-key-env",
        "MY_KEY",
        "--temperature",
        "0",
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out == "Hello there!\n"
    assert err == ""
    [config] = connect.configs
    assert config.url == "http://127.0.0.1:8080/v1"
    assert config.kind == "llama-server" and config.model == "qwen"
    assert config.api_key == KEY and config.api_key_env == "MY_KEY"
    engine = connect.engine
    assert isinstance(engine, ScriptedEngine)
    [(messages, sampling)] = engine.calls
    assert messages[-1] == {"role": "user", "content": "hi"}
    assert messages[0]["role"] == "system"  # the default system prompt
    assert sampling.temperature == 0


def test_json_names_the_server_and_model_but_no_key_or_password(
    connect: Connections, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    url = "http://me:hunter2@gpu-box:8000/v1?token=abc"
    status = run("-p", "hi", "--json", "--server", url, "--api-key-env", "MY_KEY")
    out, err = capsys.readouterr()
    assert status == 0, err
    data = json.loads(out)
    assert data["model"] == "scripted"
    assert data["server"] == "http://gpu-box:8000/v1"
    assert data["server_kind"] == "llama-server"
    assert "model_path" not in data
    assert data["reply"] == "Hello there!"
    assert data["stats"]["generated_tokens"] == 3
    # The credentials were taken out when the flag was read; they go as basic auth.
    [config] = connect.configs
    assert config.url == "http://gpu-box:8000/v1?token=abc"
    assert config.auth == ("me", "hunter2") and "hunter2" not in repr(config)
    for secret in (KEY, "hunter2", "abc"):
        assert secret not in out + err


def test_cli_over_environment_over_config(
    connect: Connections, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = paths.config_file()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[server]\nurl = "http://from-file:1"\nkind = "ollama"\nmodel = "file-model"\n'
        "connect_timeout_s = 2.5\n"
    )
    monkeypatch.setenv("KVCHAT_SERVER_URL", "http://from-env:2")
    monkeypatch.setenv("KVCHAT_SERVER_MODEL", "env-model")
    assert run("-p", "hi", "--server-model", "cli-model") == 0
    [config_used] = connect.configs
    assert config_used.url == "http://from-env:2"
    assert config_used.model == "cli-model"
    assert config_used.kind == "ollama"
    assert config_used.connect_timeout_s == 2.5
    assert config_used.api_key is None


def test_model_on_the_command_line_wins_over_a_configured_server(
    connect: Connections, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVCHAT_SERVER_URL", "http://from-env:2")
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    local: list[Path] = []

    def run_local(prompt: str, settings: object, model: object, **kwargs: object) -> int:
        local.append(model.path)  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr("chat.cli.oneshot.run_oneshot", run_local)
    assert run("-p", "hi", "--model", str(gguf)) == 0
    assert local == [gguf]
    assert connect.configs == []


def test_model_and_server_flags_together_are_a_usage_error(
    connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("-p", "hi", "--model", "x.gguf", "--server", "http://h:1") == 2
    err = capsys.readouterr().err
    assert err.startswith("chat: --model and --server cannot go together")
    assert connect.configs == []


def test_an_empty_server_flag_uses_the_local_model(
    connect: Connections, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVCHAT_SERVER_URL", "http://from-env:2")
    called: list[str] = []
    monkeypatch.setattr(
        "chat.cli.oneshot.run_oneshot", lambda *args, **kwargs: called.append("local") or 0
    )
    assert run("-p", "hi", "--server", "") == 0
    assert called == ["local"] and connect.configs == []


def test_a_server_that_does_not_answer_is_one_sentence_and_exit_2(
    connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    connect.error = ServerUnreachableError(
        "Nothing answers at http://127.0.0.1:9: is the server running?"
    )
    assert run("-p", "hi", "--server", "http://127.0.0.1:9") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "chat: Nothing answers at http://127.0.0.1:9: is the server running?\n"


class BreaksOff(ScriptedEngine):
    """Streams one token, then the connection drops: before any text, the
    engine raises; after some, it ends the reply with an error (as the remote
    engines do, so that the text that came is kept)."""

    def __init__(self, after_text: bool) -> None:
        super().__init__()
        self.after_text = after_text

    def stream_reply(  # type: ignore[override]
        self,
        messages: object,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
    ) -> Iterator[EngineEvent]:
        why = "The connection to http://h:1 dropped mid-reply."
        if not self.after_text:
            raise ServerUnreachableError(why)
        yield TokenEvent("Hel", 1)
        stats = ReplyStats(5, 5, 1, 0.1, 10.0, "error")
        yield Finished("Hel", stats, error=why)


def test_a_server_lost_before_any_text_is_one_sentence(
    connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    connect.engine = served(BreaksOff(after_text=False))
    assert run("-p", "hi", "--server", "http://h:1") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "chat: The connection to http://h:1 dropped mid-reply.\n"


def test_a_reply_cut_off_keeps_its_text_and_ends_its_line(
    connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    connect.engine = served(BreaksOff(after_text=True))
    assert run("-p", "hi", "--server", "http://h:1") == 2
    out, err = capsys.readouterr()
    assert out == "Hel\n"
    assert err == "chat: The connection to http://h:1 dropped mid-reply.\n"


def test_a_reply_cut_off_in_json_says_why_there_too(
    connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    connect.engine = served(BreaksOff(after_text=True))
    assert run("-p", "hi", "--json", "--server", "http://h:1") == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["reply"] == "Hel" and data["stats"]["finish_reason"] == "error"
    assert data["error"] == "The connection to http://h:1 dropped mid-reply."
    assert err == "chat: The connection to http://h:1 dropped mid-reply.\n"


def test_a_key_variable_that_is_not_set_is_named(
    connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("-p", "hi", "--server", "http://h:1", "--api-key-env", "MISSING_KEY") == 2
    err = capsys.readouterr().err
    assert err.startswith("chat: The server's API key should be in the environment variable ")
    assert "MISSING_KEY" in err and err.count("\n") == 1
    assert connect.configs == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--server", "localhost:8080"), '--server "localhost:8080" is not valid: allowed'),
        (("--server", "http://h:1", "--server-kind", "tgi"), '--server-kind "tgi" is not a'),
        (("--server", "http://h:1", "--api-key-env", KEY), "--api-key-env (value not shown)"),
    ],
)
def test_bad_flags_are_usage_errors(
    args: tuple[str, ...], said: str, connect: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("-p", "hi", *args) == 2
    err = capsys.readouterr().err
    assert said in err and KEY not in err
    assert connect.configs == []


def test_print_config_shows_the_server_flags_and_never_the_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    status = run(
        "--print-config",
        "--server",
        "http://me:hunter2@h:1",
        "--server-kind",
        "vllm",
        "--server-model",
        "m",
        "--api-key-env",
        "MY_KEY",
    )
    out, err = capsys.readouterr()
    assert status == 0 and err == ""
    assert 'url = "http://***@h:1"  # from --server' in out
    assert 'kind = "vllm"  # from --server-kind' in out
    assert 'model = "m"  # from --server-model' in out
    assert 'api_key_env = "MY_KEY"  # from --api-key-env' in out
    assert KEY not in out and "hunter2" not in out


def test_help_lists_the_server_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run("--help")
    out = capsys.readouterr().out
    for flag in ("--server URL", "--server-kind KIND", "--server-model NAME", "--api-key-env VAR"):
        assert flag in out


def test_nothing_listening_is_one_sentence_in_a_real_run() -> None:
    """The real `connect` against a port where nothing listens."""
    result = subprocess.run(
        [sys.executable, "-m", "chat", "-p", "hi", "--server", "http://127.0.0.1:9"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("chat: ") and result.stderr.count("\n") == 1
    assert "http://127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


# --- against a real llama-server (tests/servers.py) ----------------------------------


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """llama-server with the demo model, asking for the API key KEY."""
    with llama_server(tmp_path_factory.mktemp("llama-server"), extra=["--api-key", KEY]) as server:
        yield server


def chat_subprocess(*args: str, key: str | None) -> subprocess.CompletedProcess[str]:
    return run_chat(*args, env=None if key is None else {"MY_KEY": key})


@pytest.mark.model
def test_one_shot_json_from_a_real_llama_server(keyed_server: RunningServer) -> None:
    result = chat_subprocess(
        "-p",
        "Name three colours.",
        "--json",
        "--server",
        keyed_server.url,
        "--api-key-env",
        "MY_KEY",
        "--temperature",
        "0",
        "--max-tokens",
        "16",
        "--seed",
        "3",
        key=KEY,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    data = json.loads(result.stdout)
    assert data["server"] == keyed_server.url
    assert data["model"]
    assert data["reply"].strip()
    stats = data["stats"]
    assert 0 < stats["generated_tokens"] <= 16
    assert stats["prompt_tokens"] > 0
    assert KEY not in result.stdout


@pytest.mark.model
@pytest.mark.parametrize("key", ["sk-wrong", None])
def test_a_refused_or_missing_key_is_one_sentence(
    keyed_server: RunningServer, key: str | None
) -> None:
    result = chat_subprocess(
        "-p", "Hi", "--server", keyed_server.url, "--api-key-env", "MY_KEY", key=key
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("chat: ") and result.stderr.count("\n") == 1
    assert "MY_KEY" in result.stderr  # the variable to set, never a key
    assert "Traceback" not in result.stderr
    assert KEY not in result.stderr and "sk-wrong" not in result.stderr


# --- against hostile servers on loopback (issue 27) -----------------------------------


def one_sentence(result: subprocess.CompletedProcess[str]) -> str:
    """The run failed as a user's mistake does: exit 2, one clean line on stderr."""
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("chat: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert not any(c in result.stderr for c in "\x1b\x07\u202e\x9b"), repr(result.stderr)
    return result.stderr


def test_one_shot_shows_a_hostile_servers_model_names_clean() -> None:
    name = "m\x1b]0;pwned\x07\x1b[2J\u202eevil"
    server = serve(openai_routes(model_entry={"id": name, "object": "model"}))
    try:
        result = chat_subprocess(
            "-p", "Hi", "--server", server.url, "--server-model", "x", key=None
        )
    finally:
        server.stop()
    said = one_sentence(result)
    assert "does not serve the model 'x'" in said and "evil" in said, said


def test_one_shot_with_a_server_killed_is_one_sentence() -> None:
    server = serve(openai_routes())
    url = server.url
    server.stop()
    said = one_sentence(chat_subprocess("-p", "Hi", "--server", url, key=None))
    assert f"Nothing answers at {url}" in said


def test_one_shot_names_a_redirect_and_never_the_password() -> None:
    target = serve(openai_routes())
    routes = {
        ("GET", path): (lambda _: Reply(307, {}, {"Location": f"{target.url}/v1"}))
        for path in ("/props", "/api/version", "/v1/models")
    }
    server = serve(routes)
    host = server.url.removeprefix("http://")
    try:
        result = chat_subprocess("-p", "Hi", "--server", f"http://me:hunter2@{host}", key=None)
    finally:
        server.stop()
        target.stop()
    said = one_sentence(result)
    assert f"redirect (307) to {target.url}/v1" in said and "not follow" in said, said
    assert "hunter2" not in said and "me@" not in said
    assert server.seen[0].headers["Authorization"].startswith("Basic ")
    assert target.seen == []


def test_one_shot_says_when_an_answer_is_not_http() -> None:
    raw = RawServer(b"\x1b]0;pwned\x07garbage\r\n\r\n")
    url = raw.url
    try:
        said = one_sentence(chat_subprocess("-p", "Hi", "--server", url, key=None))
    finally:
        raw.stop()
    assert "not HTTP" in said and url in said and "Nothing answers" not in said


def test_one_shot_with_a_server_that_drops_mid_reply_keeps_the_text() -> None:
    server = serve(openai_routes(drop=True))
    try:
        result = chat_subprocess("-p", "Hi", "--server", server.url, key=None)
    finally:
        server.stop()
    said = one_sentence(result)
    assert result.stdout == "Hello there, friend.\n"
    assert "dropped" in said or "unfinished" in said, said
