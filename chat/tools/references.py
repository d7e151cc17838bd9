"""`${VAR}` in a tool server's `env` and `headers` values: secrets stay in the
environment, not in the file.

The syntax is Claude Code's (and Cursor's plain form): `${NAME}` is the value
of the environment variable NAME, `${NAME:-default}` the same or `default`
when NAME is unset or empty (as in a shell). Nothing else is special: a `$` not followed by
`{` stays as it is. The file keeps the reference; the value is read from
kvchat's own environment when the server starts, so `--print-config` and the
UI never show a secret. A reference to a variable that is not set, with no
default, keeps the server from starting (it is named in the message): sending
the literal text `${TOKEN}` as a password would help no one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from chat.errors import ConfigError

_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def reference_problem(value: str) -> str | None:
    """Why the `${...}` references in `value` cannot be read, or None."""
    position = 0
    for match in _REFERENCE.finditer(value):
        if "${" in value[position : match.start()]:
            break  # a "${" whose "}" is missing, before this reference
        name = match.group(1).split(":-", 1)[0]
        if not _NAME.match(name):
            return f"'${{{match.group(1)}}}' does not name an environment variable"
        position = match.end()
    if "${" in value[position:]:
        return "a '${' has no closing '}'"
    return None


def referenced_names(value: str) -> list[str]:
    """The variables `value` reads, in order."""
    return [match.group(1).split(":-", 1)[0] for match in _REFERENCE.finditer(value)]


def expand(value: str, environ: Mapping[str, str], *, where: str) -> str:
    """`value` with each reference replaced; a variable that is not set and
    has no default raises ConfigError naming it and `where` it is used."""

    def one(match: re.Match[str]) -> str:
        name, _, default = match.group(1).partition(":-")
        found = environ.get(name)
        if match.group(1) != name:  # with a default: as the shell's ${NAME:-default}
            return found or default
        if found is not None:
            return found
        raise ConfigError(f"{where} reads the environment variable {name}, which is not set")

    return _REFERENCE.sub(one, value)
