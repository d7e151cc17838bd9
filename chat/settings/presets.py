"""Presets (personas): a named system prompt with sampling settings.

A conversation takes a preset from the command palette (or F9): its system
prompt and sampling settings become the conversation's own, and the
conversation records the preset's name. The built-in presets are in
chat.settings.builtin_presets; the user's are TOML files in the `presets`
folder beside config.toml:

    name = "reviewer"
    description = "terse code review"      # optional, one line
    system_prompt = "You review code ..."  # optional: blank sends none;
                                           # left out, the configured one is used
    [sampling]                             # optional: any of the [sampling]
    temperature = 0.3                      # settings of config.toml
    seed = 7

Every mistake in a file is reported with the file, the field and what is
wrong, and that file is skipped; the other presets still load (as bad theme
files are, chat.ui.themes). Values are checked by the same rules as the config
file's `[sampling]` (chat.settings.values). No Textual here.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat import paths
from chat.errors import ConfigError
from chat.settings.builtin_presets import BUILTIN_PRESETS
from chat.settings.schema import SamplingSettings
from chat.settings.values import ValueRefused, format_value, parse_value

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    # mypy checks this branch (python_version = 3.10) whether or not tomli is installed.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

KNOWN_FIELDS: tuple[str, ...] = ("name", "description", "system_prompt", "sampling")
SAMPLING_NAMES: tuple[str, ...] = tuple(item.name for item in dataclasses.fields(SamplingSettings))
NAME_MAX = 40
"""A preset's name is shown in the status bar: a short one fits at 80 columns."""


@dataclass(frozen=True)
class Preset:
    """A named system prompt with sampling settings, checked."""

    name: str
    description: str = ""
    system_prompt: str | None = None
    """None: the configured system prompt (`[chat] system_prompt`); "": none."""
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """Checked values of the sampling settings the preset sets, by name
    ("temperature"); the others keep the configured values."""
    path: Path | None = None
    """The file it was read from; None for a built-in preset."""

    @property
    def builtin(self) -> bool:
        return self.path is None

    def system_prompt_for(self, configured: str) -> str:
        """The system prompt a conversation gets, `configured` being the settings' one."""
        return configured if self.system_prompt is None else self.system_prompt

    def sampling_for(self, configured: SamplingSettings) -> SamplingSettings:
        """`configured` (a copy) with the preset's values in place."""
        # Copies: `stop` is a list, which neither side may share with the other.
        return dataclasses.replace(copy.deepcopy(configured), **copy.deepcopy(dict(self.sampling)))

    def summary(self) -> str:
        """What it changes, for lists: "temperature 0.2 · min_p 0.1"."""
        parts = [
            f"{name} {format_value(f'sampling.{name}', value)}"
            for name, value in self.sampling.items()
        ]
        if self.system_prompt == "":
            parts.insert(0, "no system prompt")
        return " · ".join(parts)


@dataclass(frozen=True)
class PresetProblem:
    """One mistake in one preset file; `field` is None for file-wide problems."""

    path: Path
    field: str | None
    message: str

    @property
    def detail(self) -> str:
        """The problem without the file: "field 'sampling.temperature': 9 is out of range ..."."""
        if self.field is None:
            return self.message
        return f"field '{self.field}': {self.message}"

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


class PresetError(ConfigError):
    """A preset file cannot be used; `problems` lists every mistake found in it."""

    def __init__(self, problems: list[PresetProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(problem) for problem in problems))


# TOML's names for its types, not Python's: the user wrote TOML. bool first:
# it is a subclass of int.
_TOML_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "true/false"),
    (int, "a whole number"),
    (float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a table"),
)


def _type_name(value: object) -> str:
    for kind, name in _TOML_TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "a date or time"


def _did_you_mean(name: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f"; did you mean '{close[0]}'?" if close else "."


def _one_line_problem(value: object, what: str) -> str | None:
    """Why `value` cannot be a name or description (shown on one line), or None."""
    if not isinstance(value, str):
        return f"must be a string, not {_type_name(value)}."
    if not value.isprintable():  # a line break, a tab, an escape sequence
        return f"must be one line of printable text; it is shown in {what}."
    return None


def _check_sampling(path: Path, table: object, problems: list[PresetProblem]) -> dict[str, Any]:
    if not isinstance(table, dict):
        problems.append(
            PresetProblem(path, "sampling", f"must be a [sampling] table, not {_type_name(table)}.")
        )
        return {}
    values: dict[str, Any] = {}
    for name, raw in table.items():
        where = f"sampling.{name}"
        if name not in SAMPLING_NAMES:
            hint = _did_you_mean(name, SAMPLING_NAMES)
            problems.append(PresetProblem(path, where, f"is not a sampling setting{hint}"))
            continue
        try:
            values[name] = parse_value(where, raw)
        except ValueRefused as error:
            # "9 is out of range: allowed 0 – 5.", as the config file says it.
            problems.append(PresetProblem(path, where, error.worded("").strip()))
        except ConfigError as error:
            problems.append(PresetProblem(path, where, str(error)))
    return values


def preset_from_document(document: Mapping[str, Any], path: Path | None = None) -> Preset:
    """Check a parsed preset (a file's TOML, or a built-in's dict).

    Raises `PresetError` listing every problem: an unknown field, a missing or
    bad name, a value of the wrong type, a sampling setting that does not exist
    or a value out of its range."""
    where = path if path is not None else Path("<built-in>")
    problems: list[PresetProblem] = []
    for key in document:
        if key in KNOWN_FIELDS:
            continue
        if key in SAMPLING_NAMES:
            message = "is a sampling setting; put it in the [sampling] table at the end."
        else:
            message = "is not a preset field" + _did_you_mean(key, KNOWN_FIELDS)
        problems.append(PresetProblem(where, key, message))

    name = document.get("name")
    if "name" not in document:
        problems.append(PresetProblem(where, "name", "is missing; every preset has a name."))
    elif (problem := _one_line_problem(name, "the status bar")) is not None:
        problems.append(PresetProblem(where, "name", problem))
    elif isinstance(name, str) and (
        not name.strip() or name != name.strip() or len(name) > NAME_MAX
    ):
        problems.append(
            PresetProblem(
                where,
                "name",
                f"{name!r} cannot be a preset name (1 to {NAME_MAX} characters, "
                "no spaces at either end).",
            )
        )
    description = document.get("description", "")
    if (problem := _one_line_problem(description, "lists")) is not None:
        problems.append(PresetProblem(where, "description", problem))
    system_prompt = document.get("system_prompt")
    if "system_prompt" in document and not isinstance(system_prompt, str):
        problems.append(
            PresetProblem(
                where, "system_prompt", f"must be a string, not {_type_name(system_prompt)}."
            )
        )
    sampling = _check_sampling(where, document.get("sampling", {}), problems)
    if problems:
        raise PresetError(problems)
    assert isinstance(name, str) and isinstance(description, str)
    assert system_prompt is None or isinstance(system_prompt, str)
    return Preset(name, description, system_prompt, sampling, path)


def load_preset_file(path: Path | str) -> Preset:
    """Read one preset file; raises `PresetError` (see `preset_from_document`),
    also for a file that cannot be read or is not TOML."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PresetError([PresetProblem(path, None, "is not UTF-8 text.")]) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise PresetError([PresetProblem(path, None, f"cannot be read: {reason}.")]) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        # The message ends with "(at line L, column C)".
        raise PresetError([PresetProblem(path, None, f"is not valid TOML: {error}.")]) from None
    return preset_from_document(document, path)


def builtin_presets() -> list[Preset]:
    return [preset_from_document(document) for document in BUILTIN_PRESETS]


def load_presets(user_dir: Path | None = None) -> tuple[list[Preset], list[PresetProblem]]:
    """The built-in presets, then the user's `*.toml` files in `user_dir`.

    `user_dir` defaults to `chat.paths.user_presets_dir()`; a folder that does
    not exist adds nothing. A bad file is reported in the problems and skipped.
    A user preset with a built-in one's name replaces it in its place; two user
    files with the same name: the first in file-name order wins, the second is
    reported.
    """
    presets = builtin_presets()
    problems: list[PresetProblem] = []
    directory = paths.user_presets_dir() if user_dir is None else user_dir
    if directory.exists() and not directory.is_dir():
        problems.append(PresetProblem(directory, None, "should be a folder of preset files."))
        return presets, problems
    builtin_names = [preset.name for preset in presets]
    user_files: dict[str, Path] = {}
    for file in sorted(directory.glob("*.toml")) if directory.is_dir() else []:
        try:
            preset = load_preset_file(file)
        except PresetError as error:
            problems.extend(error.problems)
            continue
        if preset.name in user_files:
            problems.append(
                PresetProblem(
                    file,
                    "name",
                    f"{preset.name!r} is already the name of {user_files[preset.name]}; "
                    "this file is skipped.",
                )
            )
            continue
        user_files[preset.name] = file
        if preset.name in builtin_names:
            presets[builtin_names.index(preset.name)] = preset
        else:
            presets.append(preset)
    return presets, problems


def find_preset(presets: list[Preset], name: str) -> Preset | None:
    return next((preset for preset in presets if preset.name == name), None)


def preset_problem_notices(problems: list[PresetProblem], most: int = 3) -> list[str]:
    """One notice per bad preset file: the file, then up to `most` of its problems."""
    by_file: dict[Path, list[str]] = {}
    for problem in problems:
        by_file.setdefault(problem.path, []).append(problem.detail)
    notices = []
    for path, details in by_file.items():
        lines = [f"{path}:", *details[:most]]
        if len(details) > most:
            lines.append(f"… and {len(details) - most} more (`chat --list-presets` lists them).")
        notices.append("\n".join(lines))
    return notices


_EXAMPLE_PRESET = """\
# A kvchat preset. Save it as <config folder>/presets/<anything>.toml (the
# config folder is the one holding config.toml); kvchat then offers it as
# "Use preset: <name>" in the command palette (Ctrl+P) and under F9.

name = "reviewer"
description = "terse code review"   # optional, shown in lists

# Optional. Left out, the conversation keeps the system prompt of your
# settings; "" sends none.
system_prompt = \"\"\"
You review code. List concrete problems first, most serious first, each
with the line it is about; then, briefly, what is good.\"\"\"

# Optional: any of the [sampling] settings of config.toml. Those left out
# keep the values of your settings.
[sampling]
temperature = 0.3
top_p = 0.9
"""


def example_preset_toml() -> str:
    """A complete user preset file, with comments, to copy and edit."""
    return _EXAMPLE_PRESET
