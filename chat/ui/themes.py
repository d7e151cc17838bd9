"""Themes: the built-in TOML files in `themes/` and the user's own.

A theme file sets Textual's theme fields (`primary`, `background`, ...) at the
top level and kvchat's own CSS variables (`meter-free`, `code-background`, ...)
in a `[variables]` table; the app's stylesheets use those as `$meter-free`.
Built-in themes set every variable. A user theme may leave the app variables
out: they are filled from `kvchat-dark` or `kvchat-light`, whichever matches
its `dark` flag, so a user can start from a ten-line file.

Every mistake in a file is reported with the file, the field and what to do,
and a bad user file is skipped rather than stopping the app.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.css.constants import VALID_STYLE_FLAGS
from textual.theme import Theme

import chat
from chat import paths
from chat.settings.user_files import (
    FileProblem,
    UserFileError,
    did_you_mean,
    load_user_files,
    read_toml_file,
    toml_type_name,
)

DEFAULT_THEME = "kvchat-dark"
# The light theme user themes with `dark = false` take missing variables from.
DEFAULT_LIGHT_THEME = "kvchat-light"

# kvchat's own CSS variables, in the order the example file lists them.
APP_VARIABLES: tuple[str, ...] = (
    # Context meter segments, left to right.
    "meter-system",
    "meter-history",
    "meter-tools",
    "meter-new",
    "meter-thinking",
    "meter-reply",
    "meter-reserved",
    "meter-free",
    # Message blocks.
    "user-message-background",
    "user-message-foreground",
    "assistant-message-background",
    "assistant-message-foreground",
    "message-meta",
    "code-background",
    "code-foreground",
    # Text of messages that no longer fit in the context window.
    "outside-window",
    "error-panel-background",
)

# Textual's theme fields that are colours; every theme file sets all of them so
# that a theme looks the same whatever Textual derives by default.
COLOUR_FIELDS: tuple[str, ...] = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "warning",
    "error",
    "success",
)
REQUIRED_FIELDS: tuple[str, ...] = ("name", "dark", *COLOUR_FIELDS)
OPTIONAL_FIELDS: tuple[str, ...] = ("description", "variables")
KNOWN_FIELDS: tuple[str, ...] = REQUIRED_FIELDS + OPTIONAL_FIELDS

_COLOUR_HINT = "(use #rrggbb or a colour name)"
_PERCENT = re.compile(r"^\d+(\.\d+)?%$")


@dataclass
class KvchatTheme(Theme):
    """A Textual `Theme` plus what kvchat shows about it in lists."""

    description: str = ""
    path: Path | None = None
    """The file it was loaded from."""
    builtin: bool = False


def builtin_themes_dir() -> Path:
    """Folder of the built-in theme files.

    The wheel ships `themes/` as `chat/_themes`; in a source tree or an
    editable install they are in `themes/` next to the `chat` package.
    """
    package_dir = Path(chat.__file__).parent
    installed = package_dir / "_themes"
    return installed if installed.is_dir() else package_dir.parent / "themes"


def _colour_problem(value: object) -> str | None:
    """Why `value` is not a colour for a theme field, or None when it is one."""
    if not isinstance(value, str):
        return f"must be a colour in quotes, not {toml_type_name(value)} {_COLOUR_HINT}."
    try:
        Color.parse(value)
    except ColorParseError:
        return f"{value!r} is not a colour {_COLOUR_HINT}."
    return None


@functools.lru_cache(maxsize=1)
def textual_variables() -> dict[str, str]:
    """Textual's own theme variables and their generated values.

    Taken from Textual itself rather than listed here, so that a new Textual
    release that adds variables needs no change in kvchat.
    """
    return Theme(name="probe", primary="#0178d4").to_color_system().generate()


def _textual_variable_problem(name: str, value: object) -> str | None:
    """Check a value for one of Textual's variables the way its CSS reads it."""
    if not isinstance(value, str):
        return f"must be a string, not {toml_type_name(value)}."
    tokens = value.split()
    if "style" in name:
        # `block-cursor-text-style = "bold reverse"`, `link-style = "underline"`.
        bad = [token for token in tokens if token not in VALID_STYLE_FLAGS]
        if not tokens or bad:
            flags = ", ".join(sorted(VALID_STYLE_FLAGS))
            return f"{value!r} is not a text style (use words among: {flags})."
        return None
    # A colour, `auto` (contrasting text) or `initial`, with an optional
    # opacity: "#ffd400", "auto 87%", "$primary" is not allowed here.
    if len(tokens) == 2 and _PERCENT.match(tokens[1]):
        tokens = tokens[:1]
    if len(tokens) == 1 and tokens[0] in ("auto", "initial"):
        return None
    if len(tokens) == 1:
        try:
            Color.parse(tokens[0])
        except ColorParseError:
            pass
        else:
            return None
    return f"{value!r} is not a colour {_COLOUR_HINT}, optionally followed by an opacity like 80%."


def _check_variables(path: Path, table: object, problems: list[FileProblem]) -> dict[str, str]:
    if not isinstance(table, dict):
        problems.append(
            FileProblem(
                path, "variables", f"must be a [variables] table, not {toml_type_name(table)}."
            )
        )
        return {}
    textual_names = textual_variables()
    variables: dict[str, str] = {}
    for name, value in table.items():
        field = f"variables.{name}"
        problem: str | None
        if name in APP_VARIABLES:
            problem = _colour_problem(value)
        elif name in COLOUR_FIELDS:
            # Textual derives shades from the field, not from the variable:
            # setting it here would give a theme at odds with itself.
            problem = f"is a theme field; set `{name} = ...` above the [variables] table."
        elif name in textual_names:
            problem = _textual_variable_problem(name, value)
        else:
            known = frozenset(APP_VARIABLES) | frozenset(textual_names)
            problem = "is not a variable kvchat or Textual knows" + did_you_mean(name, known)
        if problem is not None:
            problems.append(FileProblem(path, field, problem))
        elif isinstance(value, str):
            variables[name] = value
    return variables


def load_theme_file(path: Path | str, *, require_all_variables: bool = False) -> KvchatTheme:
    """Read one theme file.

    `require_all_variables` is for the built-in themes, which must set every
    name in `APP_VARIABLES`; user themes get the missing ones from the
    built-in light or dark theme.

    Raises `UserFileError` listing every problem found: a file that cannot be
    read or is not TOML, an unknown or missing field, a value of the wrong
    type, a colour that does not parse, an unknown `[variables]` name.
    """
    path = Path(path)
    document = read_toml_file(path, "theme file")

    problems: list[FileProblem] = []
    textual_names = textual_variables()
    for key in document:
        if key in KNOWN_FIELDS:
            continue
        if key in APP_VARIABLES or key in textual_names:
            message = "is a variable; put it in the [variables] table at the end of the file."
        else:
            message = "is not a theme field" + did_you_mean(key, KNOWN_FIELDS)
        problems.append(FileProblem(path, key, message))
    for key in REQUIRED_FIELDS:
        if key not in document:
            problems.append(FileProblem(path, key, "is missing; every theme sets it."))

    name = document.get("name")
    if "name" in document:
        if not isinstance(name, str):
            problems.append(
                FileProblem(path, "name", f"must be a string, not {toml_type_name(name)}.")
            )
        elif not name.strip() or name != name.strip() or "," in name:
            # Textual reads "a, b" as a list of theme names to try in turn.
            problems.append(
                FileProblem(
                    path,
                    "name",
                    f"{name!r} cannot be a theme name (use letters, digits and dashes).",
                )
            )
    dark = document.get("dark")
    if "dark" in document and not isinstance(dark, bool):
        problems.append(
            FileProblem(path, "dark", f"must be true or false, not {toml_type_name(dark)}.")
        )
    description = document.get("description", "")
    if not isinstance(description, str):
        message = f"must be a string, not {toml_type_name(description)}."
        problems.append(FileProblem(path, "description", message))
    elif "\n" in description:
        problems.append(FileProblem(path, "description", "must be one line; it is shown in lists."))
    for key in COLOUR_FIELDS:
        if key in document and (problem := _colour_problem(document[key])) is not None:
            problems.append(FileProblem(path, key, problem))
    variables = _check_variables(path, document.get("variables", {}), problems)

    missing = [var for var in APP_VARIABLES if var not in variables]
    if require_all_variables:
        for variable in missing:
            problems.append(
                FileProblem(
                    path, f"variables.{variable}", "is missing; built-in themes set every one."
                )
            )
    if problems:
        raise UserFileError(problems)
    assert isinstance(name, str) and isinstance(dark, bool) and isinstance(description, str)
    if missing:
        fallback = app_variable_defaults(dark)
        variables = {**{var: fallback[var] for var in missing}, **variables}
    return KvchatTheme(
        name=name,
        dark=dark,
        primary=document["primary"],
        secondary=document["secondary"],
        accent=document["accent"],
        foreground=document["foreground"],
        background=document["background"],
        surface=document["surface"],
        panel=document["panel"],
        warning=document["warning"],
        error=document["error"],
        success=document["success"],
        variables=variables,
        description=description,
        path=path,
    )


@functools.lru_cache(maxsize=2)
def _builtin_app_variables(dark: bool) -> dict[str, str]:
    name = DEFAULT_THEME if dark else DEFAULT_LIGHT_THEME
    theme = load_theme_file(builtin_themes_dir() / f"{name}.toml", require_all_variables=True)
    return {key: theme.variables[key] for key in APP_VARIABLES}


def app_variable_defaults(dark: bool = True) -> dict[str, str]:
    """kvchat's own variables as `kvchat-dark` (or `kvchat-light`) sets them.

    The values a user theme leaves out, and the app's CSS defaults: the
    theme files are the only place kvchat's colours are written down.
    """
    return dict(_builtin_app_variables(dark))


def unknown_theme_message(name: str, available: Iterable[str]) -> str:
    """One sentence for a theme name that is not among `available`."""
    return f"There is no theme called {name!r}; the themes are: {', '.join(available)}."


def load_themes(
    user_dir: Path | None = None,
) -> tuple[list[KvchatTheme], list[FileProblem]]:
    """The built-in themes, then the user's `*.toml` files in `user_dir`.

    `user_dir` defaults to `chat.paths.user_themes_dir()`; a folder that does
    not exist simply adds nothing. A bad file is reported in the problems and
    skipped; the other themes still load. A user theme with the name of a
    built-in one replaces it, silently and in its place in the list: that is
    how a user adjusts a built-in theme. Two user files with the same theme
    name: the first in file-name order wins and the second is reported.
    """
    problems: list[FileProblem] = []
    themes: list[KvchatTheme] = []
    builtin_files = sorted(
        builtin_themes_dir().glob("*.toml"),
        # The default theme first, so that lists open on it.
        key=lambda file: (file.stem != DEFAULT_THEME, file.name),
    )
    for file in builtin_files:
        try:
            theme = load_theme_file(file, require_all_variables=True)
        except UserFileError as error:
            problems.extend(error.problems)
            continue
        theme.builtin = True
        themes.append(theme)

    directory = paths.user_themes_dir() if user_dir is None else user_dir
    themes, user_problems = load_user_files(
        directory, "theme", themes, load_theme_file, lambda theme: theme.name
    )
    return themes, problems + user_problems


def _relative_luminance(colour: Color) -> float:
    # WCAG 2.x: linearise each sRGB channel, then weight by the eye's sensitivity.
    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(colour.r) + 0.7152 * linear(colour.g) + 0.0722 * linear(colour.b)


def contrast_ratio(fg: str, bg: str) -> float:
    """WCAG 2.x contrast ratio of text colour `fg` on `bg`, from 1 to 21.

    4.5 is the minimum for body text (AA), 7 the enhanced level (AAA). A
    translucent `fg` is blended onto `bg` first, as the terminal would show
    it; `bg`'s own alpha is ignored. Raises `ColorParseError` for a value
    that is not a colour.
    """
    background = Color.parse(bg).with_alpha(1.0)
    foreground = background + Color.parse(fg)
    lighter, darker = sorted(
        (_relative_luminance(foreground), _relative_luminance(background)), reverse=True
    )
    return (lighter + 0.05) / (darker + 0.05)


_EXAMPLE_THEME = """\
# A kvchat theme. Save it as <config folder>/themes/<anything>.toml (the
# config folder is the one holding config.toml); kvchat then offers it by its
# `name`, next to the built-in themes.
#
# Colours: "#rrggbb", "#rgb", a colour name ("teal") or "rgb(r, g, b)".

name = "my-theme"
description = "Dark teal, a starting point for your own theme."
dark = true                 # false for a light theme

# Textual's theme colours: every widget is drawn from these.
primary = "#4fb3bf"         # focused borders, buttons, highlights
secondary = "#8fa7d6"
accent = "#f2b56b"          # the few things that should catch the eye
foreground = "#e4ecec"      # body text
background = "#0e1617"
surface = "#142022"         # widgets on the background
panel = "#1b2a2c"           # headers, the footer, panels
warning = "#f2b56b"
error = "#ef7a7a"
success = "#8ccf8a"

# kvchat's own colours. All optional in a user theme: any left out come from
# kvchat-dark (or kvchat-light when dark = false).
[variables]
# The context meter, left to right: system prompt, earlier conversation,
# earlier tool calls and their results (drawn dimmed), the new message, the
# reply's thinking (dimmed), the reply being generated, space reserved for
# the reply, free space.
meter-system = "#b49ae0"
meter-history = "#4f8fd9"
meter-tools = "#4f8fd9"
meter-new = "#5fd3c9"
meter-thinking = "#8ccf8a"
meter-reply = "#8ccf8a"
meter-reserved = "#f2b56b"
meter-free = "#263638"

user-message-background = "#16282b"
user-message-foreground = "#e8f0f0"
assistant-message-background = "#111b1c"
assistant-message-foreground = "#dde6e6"
message-meta = "#8ea3a5"    # "assistant · 212 tokens" headers: dim but readable

code-background = "#091011"
code-foreground = "#cfdcdc"

outside-window = "#627476"  # messages that no longer fit in the context window
error-panel-background = "#3a1f22"

# Textual's own variables can be set here too, for example:
# footer-key-foreground = "#f2b56b"
# block-cursor-background = "#4fb3bf"
"""


def example_theme_toml() -> str:
    """A complete user theme file, with comments, to copy and edit."""
    return _EXAMPLE_THEME
