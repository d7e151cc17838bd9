"""Settings: what they are, where they come from, and how they are checked.

Each setting is declared once, as a dataclass field whose metadata holds its
`FieldSpec` (kind, range, help line). `FIELDS` is built from those fields, and
everything else (validation, the TOML file, environment variables, the settings
pane, `--print-config`) works from `FIELDS`, so adding a setting means adding
one field.

Settings resolve in one order: CLI flag > environment > config file > default.
A bad config file or environment variable never stops the app: the entry keeps
its default and the problem is reported. A bad CLI value raises `ConfigError`.

No Textual and no llama_cpp here: the CLI, the engine and the UI all use this.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from chat.errors import ConfigError
from chat.paths import FOLDER_ENV_NAMES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    # mypy checks this branch (python_version = 3.10) whether or not tomli is installed.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

OVERFLOW_POLICIES = ("stop", "drop-oldest", "truncate-middle")
# "auto" is q8_0 when the model runs on the CPU and f16 (llama.cpp's default)
# on a GPU. Measured on the demo model (README, Performance): q8_0 keys cut the
# attention cost that grows with the conversation (turn-20 prompt -16 %, the
# cache -45 MB) for a perplexity change of +0.02 %. Values stay f16: quantized
# values need flash attention, which is slower on the CPU.
KEY_CACHE_TYPES = ("auto", "f16", "q8_0")

# The kinds of value a setting can hold; the settings pane builds its form
# field from the kind, and `parse_value` checks values by it.
Kind = Literal[
    "float",
    "int",
    "bool",
    "str",  # one line of non-empty text
    "text",  # any text, may be empty or span lines
    "choice",
    "optional_int",  # an int in range, or None
    "optional_path",  # a file path, or None
    "str_list",
]

# Strings that mean "no value" (None) for the optional kinds, so that a user can
# clear a field by leaving it blank or say KVCHAT_SEED=random.
_NONE_WORDS = ("", "none", "null", "random", "auto")
_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")


@dataclass(frozen=True)
class FieldSpec:
    """Everything needed to check one setting and to build its form field."""

    key: str
    """Dotted "section.name", e.g. "sampling.temperature"."""
    kind: type | str
    """One of the `Kind` strings."""
    default: object
    help: str
    """One line, shown under the field in the settings pane."""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    special: tuple[tuple[object, str], ...] = ()
    """Values allowed outside minimum..maximum, with what each means, e.g.
    `((0, "the model's own window"),)`; `None` labels the blank value of an
    optional kind."""

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]

    def special_values(self) -> tuple[object, ...]:
        return tuple(value for value, _ in self.special)

    def none_label(self) -> str:
        """What leaving an optional field blank means, e.g. "random"."""
        for value, meaning in self.special:
            if value is None:
                return meaning
        return "none"

    def range_text(self) -> str:
        """The allowed values in words, e.g. "0 – 5" or "blank = random, or 0 – 4294967295"."""
        if self.kind == "choice":
            return "one of: " + ", ".join(str(choice) for choice in self.choices or ())
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "any non-empty text"
        if self.kind == "text":
            return "any text"
        if self.kind == "str_list":
            return "a list of non-empty strings"
        if self.kind == "optional_path":
            return f"blank = {self.none_label()}, or a file path"
        parts = []
        for value, meaning in self.special:
            shown = "blank" if value is None else str(value)
            parts.append(f"{shown} = {meaning}")
        if self.kind == "optional_int" and None not in self.special_values():
            parts.append("blank = none")
        span = f"{_number(self.minimum)} – {_number(self.maximum)}"
        return ", or ".join([*parts, span])


def _number(value: float | None) -> str:
    """0 rather than 0.0 in messages; 4294967295 rather than 4.29e+09."""
    if value is None:
        return "?"
    if float(value).is_integer():
        return str(int(value))
    return str(value)


def _meta(
    kind: Kind,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    choices: tuple[Any, ...] | None = None,
    special: tuple[tuple[object, str], ...] = (),
) -> dict[str, object]:
    """Dataclass field metadata: the FieldSpec of a setting, less its key and default."""
    spec = {
        "kind": kind,
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "special": special,
    }
    return {"spec": spec}


def _setting(default: object, kind: Kind, help: str, *args: Any, **kwargs: Any) -> Any:
    """A dataclass field with an immutable default that carries its FieldSpec.

    Returns `Any` so that `temperature: float = _setting(0.8, ...)` type-checks.
    """
    return field(default=default, metadata=_meta(kind, help, *args, **kwargs))


@dataclass
class ModelSettings:
    path: str | None = _setting(
        None,
        "optional_path",
        "A .gguf model file. Blank: kvchat finds one itself.",
        special=((None, "find one automatically"),),
    )
    n_ctx: int = _setting(
        0,
        "int",
        "Context window in tokens. 0 uses the window the model was trained with.",
        256,
        1_048_576,
        special=((0, "the model's own window"),),
    )
    n_gpu_layers: int = _setting(
        -1,
        "int",
        "Layers to offload to the GPU; ignored by CPU-only builds.",
        0,
        1000,
        special=((-1, "all layers"),),
    )
    flash_attn: bool = _setting(False, "bool", "Flash attention: faster and leaner on most GPUs.")
    n_threads: int | None = _setting(
        None,
        "optional_int",
        "CPU threads for generation.",
        1,
        512,
        special=((None, "llama.cpp picks"),),
    )
    n_batch: int = _setting(512, "int", "Prompt tokens evaluated per batch.", 1, 65_536)
    cache_type_k: str = _setting(
        "auto",
        "choice",
        "KV cache key type. auto: q8_0 (leaner, faster long chats) on the CPU, f16 on a GPU.",
        choices=KEY_CACHE_TYPES,
    )


@dataclass
class SamplingSettings:
    temperature: float = _setting(
        0.8, "float", "Randomness of replies; 0 always picks the most likely token.", 0, 5
    )
    top_p: float = _setting(
        0.95, "float", "Sample only from the likeliest tokens that add up to this share.", 0, 1
    )
    top_k: int = _setting(
        40, "int", "Sample only from this many likeliest tokens; 0 is off.", 0, 1000
    )
    min_p: float = _setting(
        0.05, "float", "Drop tokens less likely than this share of the likeliest one.", 0, 1
    )
    typical_p: float = _setting(1.0, "float", "Locally typical sampling; 1 is off.", 0, 1)
    repeat_penalty: float = _setting(
        1.0, "float", "Make recently used tokens less likely; 1 is off.", 0, 3
    )
    presence_penalty: float = _setting(
        0.0, "float", "Penalty for any token already in the reply.", -2, 2
    )
    frequency_penalty: float = _setting(
        0.0, "float", "Penalty growing with how often a token appeared.", -2, 2
    )
    mirostat_mode: int = _setting(
        0, "choice", "Mirostat sampling: 0 off, 1 or 2 for its versions.", choices=(0, 1, 2)
    )
    mirostat_tau: float = _setting(5.0, "float", "Mirostat target surprise.", 0, 20)
    mirostat_eta: float = _setting(0.1, "float", "Mirostat learning rate.", 0, 1)
    seed: int | None = _setting(
        None,
        "optional_int",
        "Seed for sampling; the same seed and prompt give the same reply.",
        0,
        2**32 - 1,
        special=((None, "random"),),
    )
    max_tokens: int = _setting(
        1024, "int", "Most tokens in one reply; also reserved in the window for it.", 1, 131_072
    )
    stop: list[str] = field(
        default_factory=list,
        metadata=_meta(
            "str_list", "Extra stop sequences, one per line: the reply ends before any of them."
        ),
    )


@dataclass
class ChatSettings:
    system_prompt: str = _setting(
        "You are a helpful assistant.",
        "text",
        "Sent before every conversation; blank sends none.",
    )
    overflow: str = _setting(
        "drop-oldest",
        "choice",
        "When the conversation outgrows the window: stop, drop oldest turns, or cut the middle.",
        choices=OVERFLOW_POLICIES,
    )
    record_token_probs: bool = _setting(
        True, "bool", "Keep each token's probability for the token view."
    )
    prefill: bool = _setting(
        True, "bool", "When typing pauses, evaluate the message ahead: its reply starts at once."
    )


@dataclass
class UISettings:
    theme: str = _setting("kvchat-dark", "str", "Colour theme: a built-in name or a user theme.")


@dataclass
class Settings:
    model: ModelSettings = field(default_factory=ModelSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    chat: ChatSettings = field(default_factory=ChatSettings)
    ui: UISettings = field(default_factory=UISettings)


def _build_fields() -> dict[str, FieldSpec]:
    """FIELDS in display order: sections as in Settings, fields as declared."""
    specs: dict[str, FieldSpec] = {}
    defaults = Settings()
    for section in dataclasses.fields(Settings):
        section_value = getattr(defaults, section.name)
        for item in dataclasses.fields(section_value):
            key = f"{section.name}.{item.name}"
            specs[key] = FieldSpec(
                key=key, default=getattr(section_value, item.name), **item.metadata["spec"]
            )
    return specs


FIELDS: dict[str, FieldSpec] = _build_fields()
SECTIONS: tuple[str, ...] = tuple(item.name for item in dataclasses.fields(Settings))

# Short environment names for the settings people change most often. The long
# form KVCHAT_<SECTION>_<NAME> works for every setting and wins over these.
ENV_ALIASES: dict[str, str] = {
    "model.path": "KVCHAT_MODEL",
    "sampling.temperature": "KVCHAT_TEMPERATURE",
    "sampling.seed": "KVCHAT_SEED",
    "chat.system_prompt": "KVCHAT_SYSTEM_PROMPT",
    "ui.theme": "KVCHAT_THEME",
}


def env_names(key: str) -> list[str]:
    """Environment variables that set `key`, the one that wins first."""
    long_name = "KVCHAT_" + key.replace(".", "_").upper()
    return [long_name] + ([ENV_ALIASES[key]] if key in ENV_ALIASES else [])


def _unknown_env_problems(env: Mapping[str, str]) -> list[ConfigProblem]:
    """A KVCHAT_ variable that sets nothing is most likely a misspelt setting:
    say so, and name the variable that was probably meant."""
    known = {name for key in FIELDS for name in env_names(key)} | set(FOLDER_ENV_NAMES)
    problems = []
    for name in sorted(env):
        if not name.startswith("KVCHAT_") or name in known:
            continue
        # KVCHAT_MAX_TOKENS: a setting's own name without its section.
        same_name = [
            env_names(key)[0]
            for key, spec in FIELDS.items()
            if name == f"KVCHAT_{spec.name.upper()}"
        ]
        meant = same_name or difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        hint = f" Did you mean {meant[0]}?" if meant else ""
        message = f"{name} is not a kvchat setting and is ignored.{hint}"
        problems.append(ConfigProblem(Path("<environment>"), None, None, message))
    return problems


# --- values -----------------------------------------------------------------


def _spec(key: str) -> FieldSpec:
    try:
        return FIELDS[key]
    except KeyError:
        raise ConfigError(f"There is no setting called {key}.") from None


def _show(raw: object) -> str:
    """A value as the user wrote it, TOML-style, short enough for one message."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, str):
        text = raw if len(raw) <= 40 else raw[:39] + "…"
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(raw, float):
        return _number(raw) if math.isfinite(raw) else str(raw)
    if isinstance(raw, (list, tuple)):
        return "[" + ", ".join(_show(item) for item in raw) + "]"
    return str(raw)


def format_value(key: str, value: object) -> str:
    """A parsed value for a message: `0.8`, `"kvchat-dark"`, `(random)`."""
    if value is None:
        return f"({_spec(key).none_label()})"
    return _show(value)


def _refuse(spec: FieldSpec, raw: object, problem: str) -> ConfigError:
    return ConfigError(f"{spec.key} = {_show(raw)} {problem}: allowed {spec.range_text()}.")


def _check_range(spec: FieldSpec, value: float) -> None:
    if value in spec.special_values():
        return
    assert spec.minimum is not None and spec.maximum is not None
    if not spec.minimum <= value <= spec.maximum:
        raise _refuse(spec, value, "is out of range")


def _parse_int(spec: FieldSpec, raw: object) -> int:
    # bool is a subclass of int, but `top_k = true` is a mistake, not 1.
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            raise _refuse(spec, raw, "is not a whole number") from None
    else:
        raise _refuse(spec, raw, "is not a whole number")
    _check_range(spec, value)
    return value


def _parse_float(spec: FieldSpec, raw: object) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            raise _refuse(spec, raw, "is not a number") from None
    else:
        raise _refuse(spec, raw, "is not a number")
    if not math.isfinite(value):  # nan compares false with every bound
        raise _refuse(spec, raw, "is not a finite number")
    _check_range(spec, value)
    return value


def _parse_bool(spec: FieldSpec, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise _refuse(spec, raw, "is not true or false")


def _parse_choice(spec: FieldSpec, raw: object) -> object:
    for choice in spec.choices or ():
        # Compare types too: True == 1 and 1.0 == 1, but neither is mirostat mode 1.
        if type(raw) is type(choice) and raw == choice:
            return choice
        if isinstance(raw, str) and raw.strip() == str(choice):
            return choice
    raise _refuse(spec, raw, "is not a valid choice")


def _parse_str_list(spec: FieldSpec, raw: object) -> list[str]:
    if isinstance(raw, str):
        # Typed in a field or an environment variable: one per line, or comma-separated
        # on one line. Blank entries (a trailing newline or comma) are dropped.
        parts = raw.splitlines() if "\n" in raw else raw.split(",")
        return [part for part in parts if part.strip()]
    if isinstance(raw, (list, tuple)):
        if not all(isinstance(item, str) for item in raw):
            raise _refuse(spec, raw, "has an item that is not text")
        if not all(raw):
            raise _refuse(spec, raw, "has an empty item")
        return list(raw)
    raise _refuse(spec, raw, "is not a list")


def parse_value(key: str, raw: object) -> object:
    """Check and convert one value for setting `key`, or raise ConfigError.

    `raw` is typed when it comes from TOML or from code, and a string when a
    person typed it or it came from an environment variable: "0.7", "true",
    "" or "none" (blank, for optional settings), "a,b" or lines for lists.
    """
    spec = _spec(key)
    kind = spec.kind
    if kind in ("optional_int", "optional_path") and (
        raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE_WORDS)
    ):
        return None
    if kind in ("int", "optional_int"):
        return _parse_int(spec, raw)
    if kind == "float":
        return _parse_float(spec, raw)
    if kind == "bool":
        return _parse_bool(spec, raw)
    if kind == "choice":
        return _parse_choice(spec, raw)
    if kind == "str_list":
        return _parse_str_list(spec, raw)
    if not isinstance(raw, str):
        raise _refuse(spec, raw, "is not text")
    if kind == "text":
        return raw  # kept exactly: leading spaces and newlines can matter in a prompt
    if kind == "optional_path":
        return os.path.expanduser(raw.strip())
    if not raw.strip():
        raise _refuse(spec, raw, "is empty")
    return raw.strip()


def get_value(settings: Settings, key: str) -> object:
    spec = _spec(key)
    return getattr(getattr(settings, spec.section), spec.name)


def set_value(settings: Settings, key: str, value: object) -> None:
    """Set an already parsed value (see `parse_value`)."""
    spec = _spec(key)
    setattr(getattr(settings, spec.section), spec.name, value)


# --- the config file ----------------------------------------------------------


@dataclass
class ConfigProblem:
    """Something wrong in the config file or the environment; the app goes on."""

    path: Path
    line: int | None
    key: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}, line {self.line}" if self.line is not None else str(self.path)
        return f"{where}: {self.message}"


def backup_path(path: Path) -> Path:
    """Where `save_config(..., keep_backup=True)` keeps the previous file."""
    return path.with_name(path.name + ".bak")


_HEADER = re.compile(r"""^\s*\[\s*([^\[\]]+?)\s*\]""")
_KEY = re.compile(r"""^\s*([A-Za-z0-9_.\-"' ]+?)\s*=""")


def _find_line(text: str, section: str, name: str | None) -> int | None:
    """The line number of `name =` in `[section]`, or of the section itself.

    tomllib gives no positions, so scan the text: headers switch the current
    section; a key is matched bare, quoted, or dotted from the top level
    (`sampling.temperature = 1`). Lines inside multi-line strings are skipped.
    """
    current = ""
    section_line: int | None = None
    in_string: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        header = _HEADER.match(line)
        if header and not line.lstrip().startswith("[["):
            current = header.group(1).replace('"', "").replace("'", "").replace(" ", "")
            if current == section and section_line is None:
                section_line = number
        else:
            match = _KEY.match(line)
            if match:
                found = match.group(1).replace('"', "").replace("'", "").replace(" ", "")
                full = f"{current}.{found}" if current else found
                if name is not None and full == f"{section}.{name}":
                    return number
                if full == section and section_line is None:
                    section_line = number  # `sampling = { ... }` or `sampling = 5`
        for quotes in ('"""', "'''"):
            if line.count(quotes) % 2 == 1:
                in_string = quotes
                break
    return section_line


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column \d+\)|\s*\(at end of document\)")


def _syntax_problem(path: Path, text: str, error: Exception) -> ConfigProblem:
    message = str(error)
    position = _TOML_POSITION.search(message)
    line: int | None = None
    if position:
        line = int(position.group(1)) if position.group(1) else max(1, len(text.splitlines()))
        message = message[: position.start()] + message[position.end() :]
    return ConfigProblem(
        path,
        line,
        None,
        f"this is not valid TOML ({message.strip().rstrip('.')}). "
        "Using the defaults for every setting.",
    )


def _load(path: Path) -> tuple[Settings, list[ConfigProblem], set[str]]:
    """Like load_config, and also the keys the file set."""
    settings = Settings()
    problems: list[ConfigProblem] = []
    applied: set[str] = set()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return settings, problems, applied
    except OSError as error:
        reason = error.strerror or str(error)
        problems.append(
            ConfigProblem(path, None, None, f"cannot be read ({reason}). Using the defaults.")
        )
        return settings, problems, applied
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        problems.append(ConfigProblem(path, line, None, "is not UTF-8 text. Using the defaults."))
        return settings, problems, applied
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        problems.append(_syntax_problem(path, text, error))
        return settings, problems, applied

    def problem(section: str, name: str | None, message: str) -> None:
        key = f"{section}.{name}" if name is not None else section
        problems.append(ConfigProblem(path, _find_line(text, section, name), key, message))

    for section, table in document.items():
        if section not in SECTIONS and not isinstance(table, dict):
            # A setting written above every [section] header, e.g. `temperature = 0.5`.
            homes = [spec.section for spec in FIELDS.values() if spec.name == section]
            hint = f" Put it under [{homes[0]}]." if homes else ""
            problem(section, None, f"{section} is not a setting kvchat knows; it is ignored.{hint}")
            continue
        if section not in SECTIONS:
            known = ", ".join(f"[{name}]" for name in SECTIONS)
            message = f"[{section}] is not a section kvchat knows ({known}); it is ignored."
            problem(section, None, message)
            continue
        if not isinstance(table, dict):
            problem(section, None, f"{section} should be a [{section}] table; it is ignored.")
            continue
        for name, raw in table.items():
            key = f"{section}.{name}"
            if key not in FIELDS:
                problem(section, name, f"{key} is not a setting kvchat knows; it is ignored.")
                continue
            try:
                value = parse_value(key, raw)
            except ConfigError as error:
                default = format_value(key, FIELDS[key].default)
                problem(section, name, f"{error} Using the default {default}.")
                continue
            set_value(settings, key, value)
            applied.add(key)
    return settings, problems, applied


def load_config(path: Path) -> tuple[Settings, list[ConfigProblem]]:
    """Read a config file. Never raises for bad content: bad entries keep their
    defaults and each one is reported, with its line where it can be found."""
    settings, problems, _ = _load(path)
    return settings, problems


def save_config(settings: Settings, path: Path, *, keep_backup: bool = False) -> None:
    """Write the settings that differ from the defaults, atomically.

    `keep_backup`: copy the current file to `config.toml.bak` first; the caller
    asks for it when the file had problems, so the user's version is not lost.
    """
    document: dict[str, dict[str, Any]] = {}
    for key, spec in FIELDS.items():
        value = get_value(settings, key)
        if value is not None and value != spec.default:  # TOML has no null
            document.setdefault(spec.section, {})[spec.name] = value
    text = "# kvchat settings; only values that differ from the defaults are listed.\n\n"
    text += tomli_w.dumps(document, multiline_strings=True)

    temp_name: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_backup and path.exists():
            shutil.copy2(path, backup_path(path))
        # Write beside the target so os.replace is a rename on one file system:
        # a crash leaves either the old file or the new one, never half of one.
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
        ) as temp:
            temp_name = temp.name
            temp.write(text)
            temp.flush()
            os.fsync(temp.fileno())
        if path.exists():
            os.chmod(temp_name, stat.S_IMODE(path.stat().st_mode))
        os.replace(temp_name, path)
        temp_name = None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"Cannot save the settings to {path}: {reason}.") from error
    finally:
        if temp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)


def update_config(path: Path, key: str, value: object) -> Path | None:
    """Change one setting in the config file, keeping the others as the file has them.

    The file is read again rather than the settings in memory saved: those may
    hold values for this run only (command-line flags, environment variables).
    A file with problems loses its bad entries when rewritten, so it is copied
    to `config.toml.bak` first; returns that copy's path, or None when the file
    had no problems. Raises ConfigError for a bad value or a failed write.
    """
    settings, problems = load_config(path)
    set_value(settings, key, parse_value(key, value))
    save_config(settings, path, keep_backup=bool(problems))
    return backup_path(path) if problems else None


# --- resolving: CLI > environment > config file > default ----------------------

Source = Literal["cli", "env", "config", "default"]


@dataclass
class ResolvedSettings:
    settings: Settings
    sources: dict[str, Source]
    """Where each key in FIELDS got its value."""
    problems: list[ConfigProblem]
    """Config file problems and bad environment variables."""
    config_path: Path
    origins: dict[str, str] = field(default_factory=dict)
    """The exact origin where one is known: "KVCHAT_TEMPERATURE", "--temperature"."""


def cli_flag(key: str) -> str:
    """The conventional flag for a setting: --temperature, --n-ctx; --model for model.path."""
    return "--model" if key == "model.path" else "--" + FIELDS[key].name.replace("_", "-")


def resolve_settings(
    config_path: Path,
    cli: Mapping[str, object],
    env: Mapping[str, str],
    *,
    cli_flags: Mapping[str, str] | None = None,
) -> ResolvedSettings:
    """Combine the sources. A bad CLI value raises ConfigError (the CLI exits with
    status 2); a bad environment variable is reported and skipped.

    `cli` maps dotted keys to argparse values, None meaning "not given".
    `cli_flags` names the flag of each key for `format_effective`, where the CLI
    spells one differently from `cli_flag(key)`.
    """
    settings, problems, applied = _load(config_path)
    sources: dict[str, Source] = {key: "config" if key in applied else "default" for key in FIELDS}
    origins: dict[str, str] = {}

    for key in FIELDS:
        for name in env_names(key):
            if name not in env:
                continue
            try:
                value = parse_value(key, env[name])
            except ConfigError as error:
                fallback = "from the config file" if sources[key] == "config" else "the default"
                shown = format_value(key, get_value(settings, key))
                message = f"{name}: {error} Using {fallback} {shown}."
                problems.append(ConfigProblem(Path("<environment>"), None, key, message))
                continue
            set_value(settings, key, value)
            sources[key] = "env"
            origins[key] = name
            break

    problems += _unknown_env_problems(env)

    for key, raw in cli.items():
        if raw is None:
            continue
        set_value(settings, key, parse_value(key, raw))
        sources[key] = "cli"
        origins[key] = (cli_flags or {}).get(key) or cli_flag(key)

    return ResolvedSettings(settings, sources, problems, config_path, origins)


def _toml_value(value: object) -> str:
    """One value as TOML on one line (tomli_w would spread arrays over lines)."""
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def format_effective(resolved: ResolvedSettings) -> str:
    """Every setting as TOML, each with a comment saying where it came from."""
    lines = [
        "# kvchat settings in effect.",
        "# Order: command line > environment > config file > default.",
        f"# Config file: {resolved.config_path}",
    ]
    current = ""
    for key, spec in FIELDS.items():
        if spec.section != current:
            current = spec.section
            lines += ["", f"[{current}]"]
        source = resolved.sources.get(key, "default")
        origin = resolved.origins.get(key)
        if source == "cli":
            comment = f"from {origin or 'the command line'}"
        elif source == "env":
            comment = f"from {origin or 'the environment'}"
        elif source == "config":
            comment = f"from config file {resolved.config_path}"
        else:
            comment = "default"
        value = get_value(resolved.settings, key)
        if value is None:
            lines.append(f"# {spec.name} = ({spec.none_label()})  # {comment}")
        else:
            lines.append(f"{spec.name} = {_toml_value(value)}  # {comment}")
    return "\n".join(lines) + "\n"
