"""The user's own TOML files (themes, presets): reading them and reporting
their mistakes the same way.

Every mistake is a `FileProblem` naming the file, the field and what is wrong;
a file with any is skipped and the others still load. The app shows the
problems as one notice per file (`problem_notices`), the `chat --list-...`
commands print them all on stderr. No Textual here: chat.ui.themes uses it too.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from chat.errors import ConfigError
from chat.safe_files import UnsafeFileError, read_bytes, refusal_detail

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    # mypy checks this branch (python_version = 3.10) whether or not tomli is installed.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

T = TypeVar("T")


@dataclass(frozen=True)
class FileProblem:
    """One mistake in one user file; `field` is None for file-wide problems."""

    path: Path
    field: str | None
    message: str

    @property
    def detail(self) -> str:
        """The problem without the file: "field 'primary': 'blurple' is not a colour ..."."""
        if self.field is None:
            return self.message
        return f"field '{self.field}': {self.message}"

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


class UserFileError(ConfigError):
    """A user file cannot be used; `problems` lists every mistake found in it."""

    def __init__(self, problems: list[FileProblem]) -> None:
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


def toml_type_name(value: object) -> str:
    """What `value` is, in TOML's words: "a whole number", "a table"."""
    for kind, name in _TOML_TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "a date or time"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for the choice closest to `name`, or "."."""
    close = difflib.get_close_matches(name, sorted(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else "."


USER_FILE_LIMIT = 1024 * 1024
"""Config, theme and preset files are a few KiB: a larger one is refused unread."""


def read_toml_file(path: Path, what: str = "file") -> dict[str, Any]:
    """The parsed file; raises `UserFileError` for a file that cannot be read
    (not a regular file, larger than USER_FILE_LIMIT, unreadable), is not
    UTF-8 or is not TOML. A FIFO or a device is refused, never waited on."""
    try:
        text = read_bytes(path, USER_FILE_LIMIT, what=what).decode("utf-8")
    except UnicodeDecodeError:
        raise UserFileError([FileProblem(path, None, "is not UTF-8 text.")]) from None
    except UnsafeFileError as error:
        detail = refusal_detail(error, path, what)
        raise UserFileError([FileProblem(path, None, detail)]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        # The message ends with "(at line L, column C)".
        raise UserFileError([FileProblem(path, None, f"is not valid TOML: {error}.")]) from None


def load_user_files(
    directory: Path,
    kind: str,
    builtins: list[T],
    load: Callable[[Path], T],
    name_of: Callable[[T], str],
) -> tuple[list[T], list[FileProblem]]:
    """`builtins`, then what `load` makes of each `*.toml` file in `directory`.

    `kind` names the files in messages ("theme"). A folder that does not exist
    adds nothing. A bad file is reported in the problems and skipped. A user
    file with a built-in one's name replaces it in its place; two user files
    with the same name: the first in file-name order wins, the second is
    reported.
    """
    items = list(builtins)
    problems: list[FileProblem] = []
    if directory.exists() and not directory.is_dir():
        problems.append(FileProblem(directory, None, f"should be a folder of {kind} files."))
        return items, problems
    builtin_names = [name_of(item) for item in builtins]
    user_files: dict[str, Path] = {}
    for file in sorted(directory.glob("*.toml")) if directory.is_dir() else []:
        try:
            item = load(file)
        except UserFileError as error:
            problems.extend(error.problems)
            continue
        name = name_of(item)
        if name in user_files:
            problems.append(
                FileProblem(
                    file,
                    "name",
                    f"{name!r} is already the name of {user_files[name]}; this file is skipped.",
                )
            )
            continue
        user_files[name] = file
        if name in builtin_names:
            items[builtin_names.index(name)] = item
        else:
            items.append(item)
    return items, problems


def problem_notices(problems: Sequence[FileProblem], list_command: str, most: int = 3) -> list[str]:
    """One notice per bad file: the file, then up to `most` of its problems;
    `list_command` ("chat --list-themes") is the one that lists them all."""
    by_file: dict[Path, list[str]] = {}
    for problem in problems:
        by_file.setdefault(problem.path, []).append(problem.detail)
    notices = []
    for path, details in by_file.items():
        lines = [f"{path}:", *details[:most]]
        if len(details) > most:
            lines.append(f"… and {len(details) - most} more (`{list_command}` lists them).")
        notices.append("\n".join(lines))
    return notices
