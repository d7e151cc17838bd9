"""Checking and converting one setting's value, as typed, read from TOML or
from an environment variable; reading and writing it in `Settings`."""

from __future__ import annotations

import math
import os
import re

from chat.errors import ConfigError
from chat.settings.schema import FIELDS, FieldSpec, Settings, plain_number
from chat.settings.server import read_url, split_credentials

# Strings that mean "no value" (None) for the optional kinds, so that a user can
# clear a field by leaving it blank or say KVCHAT_SEED=random.
_NONE_WORDS = ("", "none", "null", "random", "auto")
_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")


def _spec(key: str) -> FieldSpec:
    try:
        return FIELDS[key]
    except KeyError:
        raise ConfigError(f"There is no setting called {key}.") from None


SHOWN_LENGTH = 40
"""The most characters of a value a message quotes."""


def _shortened(text: str) -> str:
    return text if len(text) <= SHOWN_LENGTH else text[: SHOWN_LENGTH - 1] + "…"


def _show(raw: object) -> str:
    """A value as the user wrote it, TOML-style, short enough for one message."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, str):
        text = _shortened(raw)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(raw, float):
        return plain_number(raw) if math.isfinite(raw) else str(raw)
    if isinstance(raw, (list, tuple)):
        return _shortened("[" + ", ".join(_show(item) for item in raw) + "]")
    return _shortened(str(raw))  # a whole number of any length, from TOML


def format_value(key: str, value: object) -> str:
    """A parsed value for a message: `0.8`, `"kvchat-dark"`, `(random)`."""
    if value is None:
        return f"({_spec(key).none_label()})"
    return _show(value)


class ValueRefused(ConfigError):
    """A value a setting does not take. The message names the setting as the
    config file does (`model.n_ctx = 5 ...`); `worded` names it otherwise."""

    def __init__(self, spec: FieldSpec, raw: object, problem: str) -> None:
        self.spec, self.raw, self.problem = spec, raw, problem
        super().__init__(self.worded(f"{spec.key} ="))

    def worded(self, name: str) -> str:
        """The message with the setting called `name`, e.g. "--ctx"."""
        shown = _show(self.raw) if self.spec.quote_refused else "(value not shown)"
        return f"{name} {shown} {self.problem}: allowed {self.spec.range_text()}."


def _check_range(spec: FieldSpec, value: float) -> None:
    if value in spec.special_values():
        return
    assert spec.minimum is not None and spec.maximum is not None
    if not spec.minimum <= value <= spec.maximum:
        raise ValueRefused(spec, value, "is out of range")


def _parse_number(spec: FieldSpec, raw: object, whole: bool) -> float:
    """A number typed or read from TOML: `whole` for an int setting."""
    convert = int if whole else float
    problem = "is not a whole number" if whole else "is not a number"
    # bool is a subclass of int, but `top_k = true` is a mistake, not 1.
    accepted = (int,) if whole else (int, float)
    if isinstance(raw, accepted) and not isinstance(raw, bool):
        try:
            value = convert(raw)
        except OverflowError:  # a TOML integer of hundreds of digits, as a float
            raise ValueRefused(spec, raw, "is out of range") from None
    elif isinstance(raw, str):
        try:
            value = convert(raw.strip())
        except ValueError:
            raise ValueRefused(spec, raw, problem) from None
    else:
        raise ValueRefused(spec, raw, problem)
    if not whole and not math.isfinite(value):  # nan compares false with every bound
        raise ValueRefused(spec, raw, "is not a finite number")
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
    raise ValueRefused(spec, raw, "is not true or false")


def _parse_choice(spec: FieldSpec, raw: object) -> object:
    for choice in spec.choices or ():
        # Compare types too: True == 1 and 1.0 == 1, but neither is mirostat mode 1.
        if type(raw) is type(choice) and raw == choice:
            return choice
        if isinstance(raw, str) and raw.strip() == str(choice):
            return choice
    raise ValueRefused(spec, raw, "is not a valid choice")


def _parse_str_list(spec: FieldSpec, raw: object) -> list[str]:
    if isinstance(raw, str):
        # Typed in a field or an environment variable: one per line, or comma-separated
        # on one line. Blank entries (a trailing newline or comma) are dropped.
        parts = raw.splitlines() if "\n" in raw else raw.split(",")
        return [part for part in parts if part.strip()]
    if isinstance(raw, (list, tuple)):
        if not all(isinstance(item, str) for item in raw):
            raise ValueRefused(spec, raw, "has an item that is not text")
        if not all(raw):
            raise ValueRefused(spec, raw, "has an empty item")
        return list(raw)
    raise ValueRefused(spec, raw, "is not a list")


def _parse_optional_str(spec: FieldSpec, raw: object) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueRefused(spec, raw, "is not text")
    value = raw.strip()
    if not value:
        return None
    if not value.isprintable():  # a line break, a tab, an escape sequence
        raise ValueRefused(spec, raw, "is not one line of text")
    if spec.pattern is not None and not re.fullmatch(spec.pattern, value):
        raise ValueRefused(spec, raw, "is not valid")
    return value


def _parse_server_url(spec: FieldSpec, raw: object) -> str | None:
    """A server URL without its user name and password (kept aside for that
    server by `read_url`): refused or accepted, they are never shown or kept."""
    shown = split_credentials(raw)[0] if isinstance(raw, str) else raw
    try:
        value = _parse_optional_str(spec, raw)
    except ValueRefused as refused:
        raise ValueRefused(spec, shown, refused.problem) from None
    return read_url(value) if value is not None else None


def parse_value(key: str, raw: object) -> object:
    """Check and convert one value for setting `key`, or raise ConfigError.

    `raw` is typed when it comes from TOML or from code, and a string when a
    person typed it or it came from an environment variable: "0.7", "true",
    "" or "none" (blank, for optional settings; only blank for optional text),
    "a,b" or lines for lists.
    """
    spec = _spec(key)
    kind = spec.kind
    if kind in ("optional_int", "optional_path") and (
        raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE_WORDS)
    ):
        return None
    if kind in ("int", "optional_int"):
        return int(_parse_number(spec, raw, whole=True))
    if kind == "float":
        return _parse_number(spec, raw, whole=False)
    if kind == "bool":
        return _parse_bool(spec, raw)
    if kind == "choice":
        return _parse_choice(spec, raw)
    if kind == "str_list":
        return _parse_str_list(spec, raw)
    if kind == "optional_str" and key == "server.url":
        return _parse_server_url(spec, raw)
    if kind == "optional_str":
        return _parse_optional_str(spec, raw)
    if not isinstance(raw, str):
        raise ValueRefused(spec, raw, "is not text")
    if kind == "text":
        return raw  # kept exactly: leading spaces and newlines can matter in a prompt
    if kind == "optional_path":
        return os.path.expanduser(raw.strip())
    if not raw.strip():
        raise ValueRefused(spec, raw, "is empty")
    return raw.strip()


def get_value(settings: Settings, key: str) -> object:
    spec = _spec(key)
    return getattr(getattr(settings, spec.section), spec.name)


def set_value(settings: Settings, key: str, value: object) -> None:
    """Set an already parsed value (see `parse_value`)."""
    spec = _spec(key)
    setattr(getattr(settings, spec.section), spec.name, value)
