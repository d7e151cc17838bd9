"""The config file (TOML): reading it without ever failing on bad content
(each problem is reported with its line), and writing it atomically.

tomllib gives no positions, so the line of a bad entry is found by scanning
the text (`_find_line`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from chat.errors import ConfigError, KvchatError
from chat.safe_files import UnsafeFileError, read_bytes, read_text, refusal_detail, shown_path
from chat.settings.schema import FIELDS, SECTIONS, Settings
from chat.settings.server import url_as_saved
from chat.settings.user_files import USER_FILE_LIMIT
from chat.settings.values import format_value, get_value, parse_value, set_value
from chat.whole_files import replace_whole

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    # mypy checks this branch (python_version = 3.10) whether or not tomli is installed.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]


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


def _dangling_link(path: Path) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return path.is_symlink()
    except OSError:  # a link loop, say: read_bytes names it
        return False
    return False


def read_config(path: Path) -> tuple[Settings, list[ConfigProblem], set[str]]:
    """Like load_config, and also the keys the file set."""
    settings = Settings()
    problems: list[ConfigProblem] = []
    applied: set[str] = set()
    if not os.path.lexists(path):
        return settings, problems, applied
    if _dangling_link(path):
        # A dotfile setup whose target moved: saying nothing would hide it.
        target = shown_path(os.readlink(path))
        message = f"is a link to {target}, which does not exist. Using the defaults."
        problems.append(ConfigProblem(path, None, None, message))
        return settings, problems, applied
    try:
        data = read_bytes(path, USER_FILE_LIMIT, what="config file")
    except UnsafeFileError as error:
        detail = refusal_detail(error, path, "config file").rstrip(".")
        problems.append(ConfigProblem(path, None, None, f"{detail}. Using the defaults."))
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
    settings, problems, _ = read_config(path)
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
    url = document.get("server", {}).get("url")
    if isinstance(url, str):  # read without its credentials: keep those the file has
        document["server"]["url"] = url_as_saved(url, _url_in_file(path))
    text = "# kvchat settings; only values that differ from the defaults are listed.\n\n"
    text += tomli_w.dumps(document, multiline_strings=True)

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_backup and path.exists():
            shutil.copy2(path, backup_path(path))
        # A linked config.toml (a dotfile setup) is written through the link:
        # replacing the link with a plain file would cut it from its repository.
        replace_whole(Path(os.path.realpath(path)), text, keep_mode=True)
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"Cannot save the settings to {path}: {reason}.") from error


def _url_in_file(path: Path) -> str | None:
    """`server.url` as the config file at `path` spells it, if it can be read."""
    try:
        document = tomllib.loads(read_text(path, USER_FILE_LIMIT, what="config file"))
    except (OSError, KvchatError, ValueError):
        return None
    table = document.get("server")
    url = table.get("url") if isinstance(table, dict) else None
    return url if isinstance(url, str) else None


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
