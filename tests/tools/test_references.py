"""`${VAR}` in env and headers values: read from kvchat's environment when a
server starts, never before."""

from __future__ import annotations

import pytest

from chat.errors import ConfigError
from chat.tools.references import expand, reference_problem, referenced_names

ENVIRON = {"TOKEN": "s3cret", "EMPTY": ""}


@pytest.mark.parametrize(
    ("value", "expanded"),
    [
        ("Bearer ${TOKEN}", "Bearer s3cret"),
        ("${TOKEN}${TOKEN}", "s3crets3cret"),
        ("${MISSING:-fallback}", "fallback"),
        ("${EMPTY:-fallback}", "fallback"),  # as a shell's ${VAR:-default}
        ("${EMPTY}", ""),  # set, even if empty
        ("${MISSING:-}", ""),
        ("$TOKEN and $ alone", "$TOKEN and $ alone"),  # only ${...} is read
    ],
)
def test_expand(value: str, expanded: str) -> None:
    assert expand(value, ENVIRON, where="the header A") == expanded


def test_a_variable_that_is_not_set_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        expand("Bearer ${NOPE}", ENVIRON, where="the header Authorization")
    assert str(caught.value) == (
        "the header Authorization reads the environment variable NOPE, which is not set"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("plain", None),
        ("${A} and ${B:-x}", None),
        ("${", "a '${' has no closing '}'"),
        ("${A} ${", "a '${' has no closing '}'"),
        ("${A-b}", "'${A-b}' does not name an environment variable"),
        ("${}", "'${}' does not name an environment variable"),
    ],
)
def test_reference_problems(value: str, problem: str | None) -> None:
    assert reference_problem(value) == problem


def test_referenced_names() -> None:
    assert referenced_names("${A}:${B:-c}") == ["A", "B"]
