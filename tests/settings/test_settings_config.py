"""Settings: validation, the config file, and resolving CLI > env > file > default."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from chat.errors import ConfigError, KvchatError
from chat.settings import config_file
from chat.settings.config_file import ConfigProblem, load_config, save_config, update_config
from chat.settings.effective import format_effective
from chat.settings.resolve import ResolvedSettings, resolve_settings
from chat.settings.schema import FIELDS, FieldSpec, Settings
from chat.settings.values import get_value, parse_value, set_value

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NUMERIC = [spec for spec in FIELDS.values() if spec.kind in ("int", "float", "optional_int")]
INTEGER = [spec for spec in FIELDS.values() if spec.kind in ("int", "optional_int")]
FLOAT = [spec for spec in FIELDS.values() if spec.kind == "float"]
CHOICE = [spec for spec in FIELDS.values() if spec.kind == "choice"]
OPTIONAL = [spec for spec in FIELDS.values() if spec.kind in ("optional_int", "optional_path")]


def ids(spec: FieldSpec) -> str:
    return spec.key


# --- FIELDS ---------------------------------------------------------------------


def test_fields_cover_every_dataclass_field_with_its_default() -> None:
    defaults = Settings()
    expected = [
        f"{section.name}.{item.name}"
        for section in dataclasses.fields(Settings)
        for item in dataclasses.fields(getattr(defaults, section.name))
    ]
    assert list(FIELDS) == expected
    for key, spec in FIELDS.items():
        assert get_value(defaults, key) == spec.default
        assert spec.help and "\n" not in spec.help
        # Every default is itself a valid value.
        assert parse_value(key, spec.default) == spec.default


def test_defaults_do_not_share_lists() -> None:
    first, second = Settings(), Settings()
    first.sampling.stop.append("x")
    assert second.sampling.stop == []
    assert FIELDS["sampling.stop"].default == []


def test_config_imports_no_textual_or_llama() -> None:
    # A fresh interpreter: this test process may have imported them for other tests.
    code = (
        "import sys, chat.settings.resolve, chat.settings.effective; "
        "print(sorted({'textual', 'llama_cpp'} & set(sys.modules)))"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("sampling.temperature", "0 – 5"),
        ("sampling.presence_penalty", "-2 – 2"),
        ("chat.overflow", "one of: stop, drop-oldest, truncate-middle"),
        ("sampling.seed", "blank = random, or 0 – 4294967295"),
        ("model.n_ctx", "0 = the model's own window, or 256 – 1048576"),
        ("model.n_gpu_layers", "-1 = all layers, or 0 – 1000"),
        ("chat.record_token_probs", "true or false"),
    ],
)
def test_range_text(key: str, text: str) -> None:
    assert FIELDS[key].range_text() == text


# --- parse_value: numbers -----------------------------------------------------------


def _step(spec: FieldSpec) -> float:
    return 0.001 if spec.kind == "float" else 1


@pytest.mark.parametrize("spec", NUMERIC, ids=ids)
def test_bounds_are_accepted(spec: FieldSpec) -> None:
    assert spec.minimum is not None and spec.maximum is not None
    for bound in (spec.minimum, spec.maximum):
        assert parse_value(spec.key, bound) == bound
        # The same value typed by a person or set in an environment variable.
        typed = str(int(bound)) if spec.kind != "float" else str(bound)
        assert parse_value(spec.key, typed) == bound


@pytest.mark.parametrize("spec", NUMERIC, ids=ids)
def test_just_outside_the_bounds_is_refused(spec: FieldSpec) -> None:
    assert spec.minimum is not None and spec.maximum is not None
    below = spec.minimum - _step(spec)
    while below in spec.special_values():  # n_gpu_layers: -1 is allowed, -2 is not
        below -= _step(spec)
    above = spec.maximum + _step(spec)
    for value in (below, above):
        with pytest.raises(ConfigError) as caught:
            parse_value(spec.key, value)
        message = str(caught.value)
        assert message.startswith(f"{spec.key} = ")
        assert "out of range" in message
        assert spec.range_text() in message


@pytest.mark.parametrize("spec", NUMERIC, ids=ids)
def test_special_values_are_accepted(spec: FieldSpec) -> None:
    for value in spec.special_values():
        assert parse_value(spec.key, value) == value


def test_n_ctx_gap_between_zero_and_256_is_refused() -> None:
    assert parse_value("model.n_ctx", 0) == 0
    for value in (1, 255):
        with pytest.raises(ConfigError):
            parse_value("model.n_ctx", value)


def test_out_of_range_message_reads_well() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_value("sampling.temperature", 7)
    assert str(caught.value) == "sampling.temperature = 7 is out of range: allowed 0 – 5."
    assert isinstance(caught.value, KvchatError)


@pytest.mark.parametrize("spec", INTEGER, ids=ids)
@pytest.mark.parametrize("raw", [True, False, "abc", 1.5, 2.0, "1.5", [1]])
def test_int_fields_refuse_other_types(spec: FieldSpec, raw: object) -> None:
    with pytest.raises(ConfigError, match=spec.key):
        parse_value(spec.key, raw)


@pytest.mark.parametrize("spec", FLOAT, ids=ids)
@pytest.mark.parametrize("raw", [True, "abc", "", "nan", "inf", None, [0.5]])
def test_float_fields_refuse_other_types(spec: FieldSpec, raw: object) -> None:
    with pytest.raises(ConfigError, match=spec.key):
        parse_value(spec.key, raw)


def test_an_int_is_fine_for_a_float_field() -> None:
    value = parse_value("sampling.temperature", 1)
    assert value == 1.0 and isinstance(value, float)
    assert parse_value("sampling.temperature", " 0.7 ") == 0.7


def test_wrong_type_message_names_field_value_and_range() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_value("sampling.temperature", "abc")
    assert str(caught.value) == 'sampling.temperature = "abc" is not a number: allowed 0 – 5.'


# --- parse_value: other kinds ---------------------------------------------------------


@pytest.mark.parametrize("spec", CHOICE, ids=ids)
def test_choices(spec: FieldSpec) -> None:
    assert spec.choices
    for choice in spec.choices:
        assert parse_value(spec.key, choice) == choice
        assert parse_value(spec.key, str(choice)) == choice
    for raw in ("bogus", True, 1.0, None, 99):
        with pytest.raises(ConfigError, match="not a valid choice: allowed one of"):
            parse_value(spec.key, raw)


def test_mirostat_mode_from_a_string_is_an_int() -> None:
    value = parse_value("sampling.mirostat_mode", "2")
    assert value == 2 and type(value) is int


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(True, True), (False, False), ("true", True), ("Yes", True), ("off", False), ("0", False)],
)
def test_bool_values(raw: object, expected: bool) -> None:
    assert parse_value("model.flash_attn", raw) is expected


@pytest.mark.parametrize("raw", [1, 0, "maybe", "", None])
def test_bool_refuses_other_values(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"model\.flash_attn"):
        parse_value("model.flash_attn", raw)


@pytest.mark.parametrize("spec", OPTIONAL, ids=ids)
@pytest.mark.parametrize("raw", [None, "", "  ", "none", "None", "random"])
def test_optional_fields_take_blank_as_none(spec: FieldSpec, raw: object) -> None:
    assert parse_value(spec.key, raw) is None


def test_optional_values() -> None:
    assert parse_value("sampling.seed", "42") == 42
    assert parse_value("model.n_threads", 8) == 8
    assert parse_value("model.path", "/m/x.gguf") == "/m/x.gguf"
    assert parse_value("model.path", "~/x.gguf") == os.path.expanduser("~/x.gguf")
    with pytest.raises(ConfigError, match=r"model\.path"):
        parse_value("model.path", 5)


def test_str_and_text() -> None:
    assert parse_value("ui.theme", " nord ") == "nord"
    for raw in ("", "   ", 3, None):
        with pytest.raises(ConfigError, match=r"ui\.theme"):
            parse_value("ui.theme", raw)
    prompt = '  Line one\nSay "hi".\n'
    assert parse_value("chat.system_prompt", prompt) == prompt
    assert parse_value("chat.system_prompt", "") == ""
    with pytest.raises(ConfigError, match=r"chat\.system_prompt"):
        parse_value("chat.system_prompt", 1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a,b", ["a", "b"]),
        ("User:\nA, B\n", ["User:", "A, B"]),
        ("", []),
        (["\n\n", "x"], ["\n\n", "x"]),
        (("x",), ["x"]),
        ([], []),
    ],
)
def test_str_list_values(raw: object, expected: list[str]) -> None:
    assert parse_value("sampling.stop", raw) == expected


@pytest.mark.parametrize("raw", [["a", ""], [1], b"x", 5])
def test_str_list_refuses(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"sampling\.stop"):
        parse_value("sampling.stop", raw)


def test_unknown_key() -> None:
    with pytest.raises(ConfigError, match="no setting"):
        parse_value("sampling.nope", 1)
    with pytest.raises(ConfigError):
        get_value(Settings(), "nope")


def test_get_and_set() -> None:
    settings = Settings()
    set_value(settings, "sampling.temperature", 0.2)
    assert settings.sampling.temperature == 0.2
    assert get_value(settings, "sampling.temperature") == 0.2


# --- save and load ------------------------------------------------------------------


def _other_value(spec: FieldSpec) -> object:
    """A valid value that differs from the default."""
    if spec.kind in ("int", "float", "optional_int"):
        assert spec.maximum is not None
        return spec.maximum if spec.default != spec.maximum else spec.minimum
    if spec.kind == "choice":
        assert spec.choices
        return next(choice for choice in spec.choices if choice != spec.default)
    if spec.kind == "bool":
        return not spec.default
    if spec.kind == "optional_path":
        return "/models/My Model.gguf"
    if spec.kind == "text":
        return 'You are "terse".\nAnswer in \'one\' line.\n\t"""Triple""" \\ done'
    if spec.kind == "str_list":
        return ["\n\nUser:", 'say "x"', "é"]
    if spec.kind == "optional_str":
        examples = {"server.url": "http://127.0.0.1:8080/v1", "server.api_key_env": "MY_KEY"}
        return examples.get(spec.key, "qwen2.5:7b-instruct")
    return "some-other-theme"


def test_round_trip_of_a_non_default_value_in_every_field(tmp_path: Path) -> None:
    settings = Settings()
    for key, spec in FIELDS.items():
        set_value(settings, key, _other_value(spec))
        assert get_value(settings, key) != spec.default
    path = tmp_path / "config.toml"
    save_config(settings, path)
    loaded, problems = load_config(path)
    assert problems == []
    assert loaded == settings


def test_save_writes_only_changed_values(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    settings = Settings()
    settings.sampling.temperature = 0.3
    save_config(settings, path)
    document = tomllib.loads(path.read_text())
    assert document == {"sampling": {"temperature": 0.3}}
    save_config(Settings(), path)
    assert tomllib.loads(path.read_text()) == {}
    assert load_config(path) == (Settings(), [])


def test_save_creates_parent_folders_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "config.toml"
    save_config(Settings(), path)
    save_config(Settings(), path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.toml"]


def test_failed_save_keeps_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[ui]\ntheme = 'mine'\n")

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_file.os, "replace", fail)
    with pytest.raises(ConfigError, match="No space left"):
        save_config(Settings(), path)
    assert path.read_text() == "[ui]\ntheme = 'mine'\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]


def test_save_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("")
    path.chmod(0o640)
    save_config(Settings(), path)
    assert path.stat().st_mode & 0o777 == 0o640


def test_keep_backup(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    save_config(Settings(), path, keep_backup=True)  # nothing to back up yet
    assert not (tmp_path / "config.toml.bak").exists()
    broken = "[sampling]\ntemperature = 9\n"
    path.write_text(broken)
    save_config(Settings(), path, keep_backup=True)
    assert (tmp_path / "config.toml.bak").read_text() == broken
    assert config_file.backup_path(path) == tmp_path / "config.toml.bak"
    path.write_text(broken)
    (tmp_path / "config.toml.bak").unlink()
    save_config(Settings(), path)
    assert not (tmp_path / "config.toml.bak").exists()


def test_update_config_changes_one_setting_and_keeps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert update_config(path, "ui.theme", "kvchat-light") is None  # no file yet
    assert tomllib.loads(path.read_text()) == {"ui": {"theme": "kvchat-light"}}
    path.write_text('[sampling]\ntemperature = 0.5\n\n[ui]\ntheme = "kvchat-light"\n')
    assert update_config(path, "ui.theme", "kvchat-nord") is None
    assert tomllib.loads(path.read_text()) == {
        "sampling": {"temperature": 0.5},
        "ui": {"theme": "kvchat-nord"},
    }
    assert not config_file.backup_path(path).exists()
    with pytest.raises(ConfigError, match=r"ui\.theme"):
        update_config(path, "ui.theme", " ")


def test_update_config_backs_up_a_file_with_problems(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    original = "[sampling]\ntemperature = 0.5\ntop_p = 7\n"
    path.write_text(original)
    assert update_config(path, "ui.theme", "kvchat-light") == config_file.backup_path(path)
    assert config_file.backup_path(path).read_text() == original
    assert tomllib.loads(path.read_text()) == {
        "sampling": {"temperature": 0.5},
        "ui": {"theme": "kvchat-light"},
    }
    # Now the file is clean: the next update leaves the backup alone.
    assert update_config(path, "ui.theme", "kvchat-sand") is None
    assert config_file.backup_path(path).read_text() == original


# --- bad config files ----------------------------------------------------------------


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "nope.toml") == (Settings(), [])


def test_syntax_error_gives_defaults_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[sampling]\ntemperature = 0.5\ntop_k = = 3\n")
    settings, problems = load_config(path)
    assert settings == Settings()
    assert len(problems) == 1
    problem = problems[0]
    assert problem.line == 3
    assert str(problem).startswith(f"{path}, line 3: ")
    assert "not valid TOML" in str(problem)
    assert "(at line" not in str(problem)  # the position is said once, in front


def test_syntax_error_at_end_of_document(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[chat]\nsystem_prompt = """never closed\n')
    _, problems = load_config(path)
    assert len(problems) == 1 and problems[0].line is not None


BAD_FILE = """\
# my settings
[sampling]
temperature = 7
top_k = true
top_p = 0.5
colour = "red"

[model]
n_batch = 256
system_prompt = '''
n_ctx = 1
'''
n_ctx = 100

[plugins]
x = 1

[ui]
theme = "nord"
"""


def test_bad_entries_keep_defaults_and_the_rest_applies(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(BAD_FILE)
    settings, problems = load_config(path)

    expected = Settings()
    expected.sampling.top_p = 0.5
    expected.model.n_batch = 256
    expected.ui.theme = "nord"
    assert settings == expected

    found = {problem.key: problem for problem in problems}
    assert set(found) == {
        "sampling.temperature",
        "sampling.top_k",
        "sampling.colour",
        "model.system_prompt",
        "model.n_ctx",
        "plugins",
    }
    assert found["sampling.temperature"].line == 3
    assert str(found["sampling.temperature"]) == (
        f"{path}, line 3: sampling.temperature = 7 is out of range: allowed 0 – 5."
        " Using the default 0.8."
    )
    assert found["sampling.top_k"].line == 4
    assert "not a whole number" in found["sampling.top_k"].message
    assert found["sampling.colour"].line == 6
    assert "not a setting kvchat knows" in found["sampling.colour"].message
    assert found["model.system_prompt"].line == 10
    # The `n_ctx = 1` inside the multi-line string is not the setting's line.
    assert found["model.n_ctx"].line == 13
    assert "100 is out of range" in found["model.n_ctx"].message
    assert found["plugins"].line == 15
    assert found["plugins"].message.startswith("[plugins] is not a section kvchat knows")
    for problem in problems:
        assert str(problem).startswith(f"{path}, line {problem.line}: ")
        assert problem.key in str(problem)


def test_dotted_keys_and_settings_outside_a_section(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('temperature = 0.5\nsampling.top_k = -3\n"ui".theme = "x"\n')
    settings, problems = load_config(path)
    assert settings.ui.theme == "x"
    assert settings.sampling.top_k == 40
    by_key = {problem.key: problem for problem in problems}
    assert by_key["temperature"].line == 1
    assert "[sampling]" in by_key["temperature"].message
    assert by_key["sampling.top_k"].line == 2


def test_section_that_is_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("sampling = 3\n[ui]\ntheme = 'x'\n")
    settings, problems = load_config(path)
    assert settings.ui.theme == "x"
    assert [(p.key, p.line) for p in problems] == [("sampling", 1)]


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"[ui]\ntheme = 'caf\xe9'\n")
    settings, problems = load_config(path)
    assert settings == Settings()
    assert len(problems) == 1
    assert problems[0].line == 2
    assert "UTF-8" in str(problems[0]) and str(path) in str(problems[0])


def test_file_that_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.mkdir()  # reading a folder fails even as root
    settings, problems = load_config(path)
    assert settings == Settings()
    assert [str(p) for p in problems] == [
        f"{path}: is a folder: only regular files are read. Using the defaults."
    ]


LOAD_CONFIG = """
import json, sys
from pathlib import Path
from chat.settings.config_file import load_config
from chat.settings.schema import Settings
settings, problems = load_config(Path(sys.argv[1]))
print(json.dumps([settings == Settings(), [str(problem) for problem in problems]]))
"""


def file_modes_apply() -> Callable[[], None] | None:
    """For a child process (preexec_fn): as root, give up the two capabilities that
    let root read any file (Linux: gone from the bounding set, so from the child
    after exec), so that file modes apply to it as to any user. Otherwise None."""
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only calls it

    def drop_capabilities() -> None:
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # 24: PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return drop_capabilities


@pytest.mark.skipif(sys.platform == "win32", reason="file modes are POSIX")
def test_file_without_read_permission(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[ui]\ntheme = 'x'\n")
    path.chmod(0)
    # Read in another process, which the file's mode applies to even as root.
    result = subprocess.run(
        [sys.executable, "-c", LOAD_CONFIG, str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        preexec_fn=file_modes_apply(),
    )
    assert result.returncode == 0, result.stderr
    defaults, problems = json.loads(result.stdout)
    assert defaults is True
    assert problems == [f"{path}: cannot be opened: permission denied. Using the defaults."]


def test_problem_without_a_line() -> None:
    problem = ConfigProblem(Path("/x/config.toml"), None, None, "cannot be read.")
    assert str(problem) == "/x/config.toml: cannot be read."


# --- resolving ------------------------------------------------------------------------


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text("[sampling]\ntemperature = 0.5\ntop_p = 0.5\nmin_p = 0.5\ntop_k = 10\n")
    return path


def test_precedence_cli_env_config_default(tmp_path: Path) -> None:
    path = _config(tmp_path)
    env = {
        "KVCHAT_TEMPERATURE": "0.6",
        "KVCHAT_SAMPLING_TOP_P": "0.6",
        "KVCHAT_MODEL": "/m/a.gguf",
        "UNRELATED": "x",
    }
    cli = {"sampling.temperature": 0.7, "sampling.seed": None, "model.n_ctx": 4096}
    resolved = resolve_settings(path, cli, env)
    settings = resolved.settings
    assert settings.sampling.temperature == 0.7
    assert settings.sampling.top_p == 0.6
    assert settings.sampling.min_p == 0.5
    assert settings.sampling.top_k == 10
    assert settings.sampling.seed is None
    assert settings.model.path == "/m/a.gguf"
    assert settings.model.n_ctx == 4096
    assert set(resolved.sources) == set(FIELDS)
    assert resolved.sources["sampling.temperature"] == "cli"
    assert resolved.sources["model.n_ctx"] == "cli"
    assert resolved.sources["sampling.top_p"] == "env"
    assert resolved.sources["model.path"] == "env"
    assert resolved.sources["sampling.min_p"] == "config"
    assert resolved.sources["sampling.seed"] == "default"
    assert resolved.sources["ui.theme"] == "default"
    assert resolved.problems == []
    assert resolved.config_path == path


def test_long_env_name_wins_over_alias(tmp_path: Path) -> None:
    env = {"KVCHAT_TEMPERATURE": "0.1", "KVCHAT_SAMPLING_TEMPERATURE": "0.2"}
    resolved = resolve_settings(tmp_path / "none.toml", {}, env)
    assert resolved.settings.sampling.temperature == 0.2
    assert resolved.origins["sampling.temperature"] == "KVCHAT_SAMPLING_TEMPERATURE"


def test_env_values_are_parsed(tmp_path: Path) -> None:
    env = {
        "KVCHAT_SEED": "random",
        "KVCHAT_MODEL_FLASH_ATTN": "yes",
        "KVCHAT_SAMPLING_STOP": "User:,###",
        "KVCHAT_SYSTEM_PROMPT": "Be brief.\nVery.",
        "KVCHAT_THEME": "nord",
    }
    path = tmp_path / "config.toml"
    path.write_text("[sampling]\nseed = 5\n")
    settings = resolve_settings(path, {}, env).settings
    assert settings.sampling.seed is None
    assert settings.model.flash_attn is True
    assert settings.sampling.stop == ["User:", "###"]
    assert settings.chat.system_prompt == "Be brief.\nVery."
    assert settings.ui.theme == "nord"


def test_bad_env_var_is_a_problem_and_falls_back(tmp_path: Path) -> None:
    path = _config(tmp_path)
    env = {"KVCHAT_SAMPLING_TOP_K": "abc", "KVCHAT_SAMPLING_MAX_TOKENS": "0"}
    resolved = resolve_settings(path, {}, env)
    assert resolved.settings.sampling.top_k == 10
    assert resolved.sources["sampling.top_k"] == "config"
    assert resolved.settings.sampling.max_tokens == 1024
    assert resolved.sources["sampling.max_tokens"] == "default"
    by_key = {problem.key: problem for problem in resolved.problems}
    top_k = by_key["sampling.top_k"]
    assert top_k.path == Path("<environment>") and top_k.line is None
    assert str(top_k).startswith("<environment>: KVCHAT_SAMPLING_TOP_K: sampling.top_k")
    assert "from the config file 10" in str(top_k)
    assert "Using the default 1024" in str(by_key["sampling.max_tokens"])


def test_bad_cli_value_raises_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--temperature 9 is out of range: allowed 0 – 5\.$"):
        resolve_settings(tmp_path / "none.toml", {"sampling.temperature": 9.0}, {})
    flags = {"model.n_ctx": "--ctx"}
    with pytest.raises(ConfigError, match=r"^--ctx 5 is out of range"):
        resolve_settings(tmp_path / "none.toml", {"model.n_ctx": "5"}, {}, cli_flags=flags)


def test_config_problems_are_kept_when_resolving(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[sampling]\ntemperature = 9\n")
    resolved = resolve_settings(path, {}, {})
    assert [problem.key for problem in resolved.problems] == ["sampling.temperature"]
    assert resolved.sources["sampling.temperature"] == "default"


def test_format_effective_says_where_each_value_came_from(tmp_path: Path) -> None:
    path = _config(tmp_path)
    env = {"KVCHAT_SAMPLING_TOP_P": "0.6", "KVCHAT_SYSTEM_PROMPT": 'Say "hi".\nBye.'}
    cli = {"sampling.temperature": 0.7, "model.path": "/m/x.gguf"}
    resolved = resolve_settings(path, cli, env, cli_flags={"model.path": "--model-file"})
    text = format_effective(resolved)
    lines = text.splitlines()
    assert "temperature = 0.7  # from --temperature" in lines
    assert 'path = "/m/x.gguf"  # from --model-file' in lines
    assert "top_p = 0.6  # from KVCHAT_SAMPLING_TOP_P" in lines
    assert f"min_p = 0.5  # from config file {path}" in lines
    assert "max_tokens = 1024  # default" in lines
    assert "# seed = (random)  # default" in lines
    assert "stop = []  # default" in lines
    # It is TOML, and reading it back gives the same settings.
    document = tomllib.loads(text)
    assert document["chat"]["system_prompt"] == 'Say "hi".\nBye.'
    for key in FIELDS:
        section, name = key.split(".")
        value = get_value(resolved.settings, key)
        assert document[section].get(name) == value


def test_format_effective_without_origins() -> None:
    resolved = ResolvedSettings(
        Settings(),
        {key: "default" for key in FIELDS} | {"ui.theme": "env", "model.n_batch": "cli"},
        [],
        Path("/x/config.toml"),
    )
    text = format_effective(resolved)
    assert 'theme = "kvchat-dark"  # from the environment' in text
    assert "n_batch = 512  # from the command line" in text


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("KVCHAT_MAX_TOKENS", "Did you mean KVCHAT_SAMPLING_MAX_TOKENS?"),
        ("KVCHAT_TEMPERTURE", "Did you mean KVCHAT_TEMPERATURE?"),
        ("KVCHAT_SAMPLING_TOPP", "Did you mean KVCHAT_SAMPLING_TOP_P?"),
        ("KVCHAT_WHATEVER", ""),
    ],
)
def test_unknown_kvchat_variable_is_reported_with_a_hint(
    tmp_path: Path, name: str, hint: str
) -> None:
    env = {name: "40", "KVCHAT_DATA_DIR": "/tmp/x", "KVCHAT_CONFIG_DIR": "/tmp/y", "HOME": "/"}
    resolved = resolve_settings(tmp_path / "none.toml", {}, env)
    assert [str(problem) for problem in resolved.problems] == [
        f"<environment>: {name} is not a kvchat setting and is ignored."
        + (f" {hint}" if hint else "")
    ]
    assert resolved.settings == Settings()


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (1e308, "1e+308"),
        (-1e20, "-1e+20"),
        (4294967296, "4294967296"),
        (10**400, "1" + "0" * 38 + "…"),
        ([1.5] * 30, "[" + ", ".join(["1.5"] * 8)[:38] + "…"),
    ],
    ids=["huge-float", "large-negative", "whole", "huge-int", "long-list"],
)
def test_a_refused_value_is_quoted_short(raw: object, shown: str) -> None:
    """A value far out of range is quoted as written, in a line: not as
    hundreds of digits (1e308 was its 309)."""
    with pytest.raises(ConfigError) as caught:
        parse_value("sampling.temperature", raw)
    assert str(caught.value).startswith(f"sampling.temperature = {shown} is ")
