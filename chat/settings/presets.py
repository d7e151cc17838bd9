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
files are: chat.settings.user_files serves both). Values are checked by the
same rules as the config file's `[sampling]` (chat.settings.values). No
Textual here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat import paths
from chat.errors import ConfigError
from chat.settings.builtin_presets import BUILTIN_PRESETS
from chat.settings.schema import SamplingSettings
from chat.settings.user_files import (
    FileProblem,
    UserFileError,
    did_you_mean,
    load_user_files,
    read_toml_file,
    toml_type_name,
)
from chat.settings.values import ValueRefused, format_value, parse_value

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


def _one_line_problem(value: object, what: str) -> str | None:
    """Why `value` cannot be a name or description (shown on one line), or None."""
    if not isinstance(value, str):
        return f"must be a string, not {toml_type_name(value)}."
    if not value.isprintable():  # a line break, a tab, an escape sequence
        return f"must be one line of printable text; it is shown in {what}."
    return None


def _check_sampling(path: Path, table: object, problems: list[FileProblem]) -> dict[str, Any]:
    if not isinstance(table, dict):
        message = f"must be a [sampling] table, not {toml_type_name(table)}."
        problems.append(FileProblem(path, "sampling", message))
        return {}
    values: dict[str, Any] = {}
    for name, raw in table.items():
        where = f"sampling.{name}"
        if name not in SAMPLING_NAMES:
            hint = did_you_mean(name, SAMPLING_NAMES)
            problems.append(FileProblem(path, where, f"is not a sampling setting{hint}"))
            continue
        try:
            values[name] = parse_value(where, raw)
        except ValueRefused as error:
            # "9 is out of range: allowed 0 – 5.", as the config file says it.
            problems.append(FileProblem(path, where, error.worded("").strip()))
        except ConfigError as error:
            problems.append(FileProblem(path, where, str(error)))
    return values


def preset_from_document(document: Mapping[str, Any], path: Path | None = None) -> Preset:
    """Check a parsed preset (a file's TOML, or a built-in's dict).

    Raises `UserFileError` listing every problem: an unknown field, a missing or
    bad name, a value of the wrong type, a sampling setting that does not exist
    or a value out of its range."""
    where = path if path is not None else Path("<built-in>")
    problems: list[FileProblem] = []
    for key in document:
        if key in KNOWN_FIELDS:
            continue
        if key in SAMPLING_NAMES:
            message = "is a sampling setting; put it in the [sampling] table at the end."
        else:
            message = "is not a preset field" + did_you_mean(key, KNOWN_FIELDS)
        problems.append(FileProblem(where, key, message))

    name = document.get("name")
    if "name" not in document:
        problems.append(FileProblem(where, "name", "is missing; every preset has a name."))
    elif (problem := _one_line_problem(name, "the status bar")) is not None:
        problems.append(FileProblem(where, "name", problem))
    elif isinstance(name, str) and (
        not name.strip() or name != name.strip() or len(name) > NAME_MAX
    ):
        problems.append(
            FileProblem(
                where,
                "name",
                f"{name!r} cannot be a preset name (1 to {NAME_MAX} characters, "
                "no spaces at either end).",
            )
        )
    description = document.get("description", "")
    if (problem := _one_line_problem(description, "lists")) is not None:
        problems.append(FileProblem(where, "description", problem))
    system_prompt = document.get("system_prompt")
    if "system_prompt" in document and not isinstance(system_prompt, str):
        problems.append(
            FileProblem(
                where, "system_prompt", f"must be a string, not {toml_type_name(system_prompt)}."
            )
        )
    sampling = _check_sampling(where, document.get("sampling", {}), problems)
    if problems:
        raise UserFileError(problems)
    assert isinstance(name, str) and isinstance(description, str)
    assert system_prompt is None or isinstance(system_prompt, str)
    return Preset(name, description, system_prompt, sampling, path)


def load_preset_file(path: Path | str) -> Preset:
    """Read one preset file; raises `UserFileError` (see `preset_from_document`),
    also for a file that cannot be read or is not TOML."""
    path = Path(path)
    document = read_toml_file(path, "preset file")
    return preset_from_document(document, path)


def builtin_presets() -> list[Preset]:
    return [preset_from_document(document) for document in BUILTIN_PRESETS]


def load_presets(user_dir: Path | None = None) -> tuple[list[Preset], list[FileProblem]]:
    """The built-in presets, then the user's `*.toml` files in `user_dir`
    (default: `chat.paths.user_presets_dir()`), with the problems of the files
    skipped; a user preset with a built-in one's name replaces it
    (`chat.settings.user_files.load_user_files`)."""
    directory = paths.user_presets_dir() if user_dir is None else user_dir
    return load_user_files(
        directory, "preset", builtin_presets(), load_preset_file, lambda preset: preset.name
    )


def find_preset(presets: list[Preset], name: str) -> Preset | None:
    return next((preset for preset in presets if preset.name == name), None)


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
