"""The [server] settings (issue 17): checking the values, where they come from,
what `--print-config` shows, and the ServerConfig built from them. The API key
is never a setting and never appears anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from chat.engine.remote import SERVER_KINDS as ENGINE_KINDS
from chat.engine.remote import ServerConfig, ServerKind
from chat.errors import ConfigError
from chat.session.server_choice import ApiKeyMissingError, server_config
from chat.settings.config_file import save_config
from chat.settings.effective import format_effective
from chat.settings.resolve import resolve_settings
from chat.settings.schema import FIELDS, SERVER_KINDS, ServerSettings, Settings
from chat.settings.server import credentials_for, public_url, url_for_display
from chat.settings.values import parse_value

KEY = "sk-test-0123456789abcdef"  # a made-up key: it must never be shown


def test_the_engine_contract_uses_the_settings_kinds() -> None:
    assert ENGINE_KINDS is SERVER_KINDS
    assert get_args(ServerKind) == SERVER_KINDS
    assert FIELDS["server.kind"].choices == SERVER_KINDS


def test_server_section_defaults_to_the_local_model() -> None:
    server = Settings().server
    assert server == ServerSettings()
    assert server.url is None and server.model is None and server.api_key_env is None
    assert server.kind == "auto"
    # No field could hold a key: only the name of a variable.
    assert not any("key" in name and "env" not in name for name in vars(server))


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("server.url", "blank = use the local model, or an http:// or https:// URL"),
        ("server.model", "blank = the server's first model, or one line of text"),
        ("server.api_key_env", "blank = send no key, or a variable name (letters, digits, _)"),
        ("server.kind", "one of: auto, llama-server, vllm, ollama, openai"),
    ],
)
def test_range_text(key: str, text: str) -> None:
    assert FIELDS[key].range_text() == text


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080",
        "https://api.example.com/v1",
        "HTTP://LOCALHOST:11434/",
        "http://[::1]:8000/v1",
    ],
)
def test_urls_accepted(url: str) -> None:
    assert parse_value("server.url", f" {url} ") == url


@pytest.mark.parametrize(
    ("raw", "kept", "credentials"),
    [
        ("http://me:secret@gpu-box:8080", "http://gpu-box:8080", ("me", "secret")),
        ("https://me:p%40ss@box/v1?x=1", "https://box/v1?x=1", ("me", "p@ss")),
        ("http://token@box", "http://box", ("token", "")),
    ],
)
def test_credentials_are_taken_out_when_a_url_is_read(
    raw: str, kept: str, credentials: tuple[str, str]
) -> None:
    """The setting never holds them (the settings pane, --print-config, the
    database see it); they are kept for that server and used as basic auth."""
    assert parse_value("server.url", raw) == kept
    assert credentials_for(kept) == credentials
    config = server_config(ServerSettings(url=kept), {})
    assert config is not None and config.url == kept and config.auth == credentials
    # For that server only: another port or host gets none.
    assert credentials_for(kept.replace("box", "other")) is None
    assert server_config(ServerSettings(url="http://gpu-box:8081"), {}).auth is None  # type: ignore[union-attr]


@pytest.mark.parametrize("source", ["config file", "environment"])
def test_credentials_from_the_config_file_or_environment_are_taken_out(
    tmp_path: Path, source: str
) -> None:
    config = tmp_path / "config.toml"
    env: dict[str, str] = {}
    if source == "config file":
        config.write_text('[server]\nurl = "http://me:hunter2@box:8080"\n')
    else:
        env["KVCHAT_SERVER_URL"] = "http://me:hunter2@box:8080"
    settings = resolve_settings(config, {}, env).settings
    assert settings.server.url == "http://box:8080"
    assert "hunter2" not in repr(settings)
    assert credentials_for("http://box:8080/v1") == ("me", "hunter2")


def test_a_refused_url_is_named_without_its_password() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_value("server.url", "http://me:hunter2@bad host:80")
    assert "hunter2" not in str(caught.value) and "bad host" in str(caught.value)


@pytest.mark.parametrize(
    "raw", ["localhost:8080", "ftp://host", "http://", "http://a b", "http://host:80:80", 8080]
)
def test_urls_refused_say_what_is_allowed(raw: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_value("server.url", raw)
    assert str(caught.value).startswith("server.url = ")
    assert "an http:// or https:// URL" in str(caught.value)


@pytest.mark.parametrize("key", ["server.url", "server.model", "server.api_key_env"])
@pytest.mark.parametrize("raw", [None, "", "   "])
def test_blank_text_is_none(key: str, raw: object) -> None:
    assert parse_value(key, raw) is None


def test_model_names_are_one_line_of_text() -> None:
    assert parse_value("server.model", " qwen2.5:7b-instruct ") == "qwen2.5:7b-instruct"
    assert parse_value("server.model", "none") == "none"  # a name, not a blank
    with pytest.raises(ConfigError, match="one line"):
        parse_value("server.model", "a\nb")


def test_api_key_env_takes_a_variable_name() -> None:
    assert parse_value("server.api_key_env", "OPENAI_API_KEY") == "OPENAI_API_KEY"
    assert parse_value("server.api_key_env", "_my_key2") == "_my_key2"
    for raw in ("2KEY", "MY-KEY", "$KEY"):
        with pytest.raises(ConfigError, match="a variable name"):
            parse_value("server.api_key_env", raw)


def test_a_key_given_where_its_variable_belongs_is_never_repeated() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_value("server.api_key_env", KEY)
    assert KEY not in str(caught.value) and KEY[:10] not in str(caught.value)
    assert "server.api_key_env" in str(caught.value)


def test_config_then_environment_then_cli(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[server]\nurl = "http://file:1"\nmodel = "from-file"\napi_key_env = "FILE_KEY"\n'
        "read_timeout_s = 60\n"
    )
    env = {"KVCHAT_SERVER_URL": "http://env:2", "KVCHAT_SERVER_KIND": "vllm"}
    cli = {"server.url": "http://cli:3", "server.api_key_env": None}
    resolved = resolve_settings(config, cli, env, cli_flags={"server.url": "--server"})
    server = resolved.settings.server
    assert server.url == "http://cli:3" and resolved.origins["server.url"] == "--server"
    assert server.kind == "vllm" and resolved.origins["server.kind"] == "KVCHAT_SERVER_KIND"
    assert server.model == "from-file" and resolved.sources["server.model"] == "config"
    assert server.api_key_env == "FILE_KEY"
    assert server.read_timeout_s == 60.0
    assert resolved.problems == []


def test_an_empty_flag_or_variable_means_the_local_model(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[server]\nurl = "http://file:1"\n')
    by_env = resolve_settings(config, {}, {"KVCHAT_SERVER_URL": ""})
    assert by_env.settings.server.url is None
    by_flag = resolve_settings(config, {"server.url": ""}, {})
    assert by_flag.settings.server.url is None


def test_a_bad_cli_value_is_an_error_named_by_its_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_settings(
            tmp_path / "none.toml",
            {"server.api_key_env": KEY},
            {},
            cli_flags={"server.api_key_env": "--api-key-env"},
        )
    assert str(caught.value).startswith("--api-key-env (value not shown) is not valid")
    assert KEY not in str(caught.value)


def test_a_bad_config_entry_is_reported_and_skipped(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nurl = "localhost:8080"\napi_key_env = "{KEY}"\n')
    resolved = resolve_settings(config, {}, {})
    assert resolved.settings.server == ServerSettings()
    lines = {problem.line for problem in resolved.problems}
    assert lines == {2, 3}
    assert all(KEY not in str(problem) for problem in resolved.problems)


def test_the_key_variable_may_be_a_kvchat_name_without_a_warning(tmp_path: Path) -> None:
    env = {"KVCHAT_SERVER_API_KEY_ENV": "KVCHAT_KEY", "KVCHAT_KEY": KEY}
    resolved = resolve_settings(tmp_path / "none.toml", {}, env)
    assert resolved.problems == []


def test_a_key_in_a_kvchat_variable_is_pointed_to_api_key_env(tmp_path: Path) -> None:
    resolved = resolve_settings(tmp_path / "none.toml", {}, {"KVCHAT_API_KEY": KEY})
    [problem] = resolved.problems
    assert "KVCHAT_API_KEY is not a kvchat setting" in str(problem)
    assert "--api-key-env KVCHAT_API_KEY" in str(problem)
    assert KEY not in str(problem)


def test_print_config_shows_the_variable_name_never_a_key_or_password(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[server]\nurl = "http://me:hunter2@box:8080/v1"\n')
    env = {"KVCHAT_SERVER_API_KEY_ENV": "MY_KEY", "MY_KEY": KEY}
    text = format_effective(resolve_settings(config, {}, env))
    assert "[server]" in text
    assert 'url = "http://***@box:8080/v1"  # from config file' in text
    assert 'api_key_env = "MY_KEY"  # from KVCHAT_SERVER_API_KEY_ENV' in text
    assert "# model = (the server's first model)  # default" in text
    assert KEY not in text and "hunter2" not in text


@pytest.mark.parametrize(
    ("url", "public", "shown"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        (
            "HTTPS://me:pw@Host.example:8443/v1?key=abc#x",
            "https://Host.example:8443/v1",
            "https://***@Host.example:8443/v1?key=abc#x",
        ),
        ("http://user@h/", "http://h/", "http://***@h/"),
        ("http://[::1]:8000", "http://[::1]:8000", "http://[::1]:8000"),
        ("not a url", "", "not a url"),
    ],
)
def test_urls_as_recorded_and_as_shown(url: str, public: str, shown: str) -> None:
    assert public_url(url) == public
    assert url_for_display(url) == shown


# --- the ServerConfig handed to the engine ---------------------------------------------


def test_no_url_no_server() -> None:
    assert server_config(ServerSettings(), {"OPENAI_API_KEY": KEY}) is None


def test_server_config_carries_every_setting_and_reads_the_key() -> None:
    settings = ServerSettings(
        url="http://box:8000/v1",
        kind="vllm",
        model="qwen",
        api_key_env="MY_KEY",
        connect_timeout_s=2.5,
        read_timeout_s=90.0,
    )
    config = server_config(settings, {"MY_KEY": f" {KEY}\n"})
    assert config == ServerConfig(
        url="http://box:8000/v1",
        kind="vllm",
        model="qwen",
        api_key=KEY,
        api_key_env="MY_KEY",
        connect_timeout_s=2.5,
        read_timeout_s=90.0,
    )
    assert KEY not in repr(config)


def test_without_a_variable_no_key_is_sent() -> None:
    config = server_config(ServerSettings(url="http://box:8080"), {"OPENAI_API_KEY": KEY})
    assert config is not None
    assert config.api_key is None and config.api_key_env is None
    assert config.kind == "auto" and config.model is None


@pytest.mark.parametrize("environ", [{}, {"MY_KEY": ""}, {"MY_KEY": "  "}])
def test_a_named_variable_that_is_not_set_is_refused_by_name(environ: dict[str, str]) -> None:
    settings = ServerSettings(url="http://box:8080", api_key_env="MY_KEY")
    with pytest.raises(ApiKeyMissingError) as caught:
        server_config(settings, environ)
    assert isinstance(caught.value, ConfigError)
    assert caught.value.variable == "MY_KEY"
    assert "MY_KEY" in str(caught.value) and "is not set" in str(caught.value)


def test_saving_the_settings_keeps_the_credentials_the_config_file_holds(tmp_path: Path) -> None:
    """The setting holds the URL without them; Save (the settings pane, a theme
    change) writes the file's own spelling back rather than drop them."""
    config = tmp_path / "config.toml"
    config.write_text('[server]\nurl = "http://me:hunter2@box:8080"\n')
    settings = resolve_settings(config, {}, {}).settings
    settings.sampling.temperature = 0.3
    save_config(settings, config)
    text = config.read_text()
    assert 'url = "http://me:hunter2@box:8080"' in text and "temperature = 0.3" in text
    # Another URL, or credentials that came from elsewhere, are never written.
    settings.server.url = "http://box:9090"
    save_config(settings, config)
    assert "hunter2" not in config.read_text()
    assert parse_value("server.url", "http://you:pw@box:9090") == "http://box:9090"
    save_config(settings, config)
    assert "pw@" not in config.read_text()
