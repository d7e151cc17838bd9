"""Which input schemas a tool can be used with."""

from __future__ import annotations

import pytest

from chat.tools.schemas import SCHEMA_LIMIT, schema_problem


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        {
            "type": "object",
            "$defs": {"point": {"type": "object"}},
            "properties": {"p": {"$ref": "#/$defs/point"}, "q": {"$ref": "#"}},
        },
    ],
)
def test_good_schemas(schema: dict[str, object]) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ("a string", "its input schema is not a JSON object"),
        ({"type": "string"}, 'its input schema is not of "type": "object"'),
        (
            {"type": "object", "properties": {"x": {"type": "frobnicate"}}},
            "its input schema is not valid JSON Schema (at properties/x/type: "
            "'frobnicate' is not valid under any of the given schemas)",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}},
            "its input schema's $ref #/$defs/nope points at nothing",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
            "its input schema refers to another document (https://example.com/s.json)",
        ),
        (
            {"type": "object", "description": "x" * SCHEMA_LIMIT},
            "its input schema is larger than 64 KiB",
        ),
    ],
)
def test_broken_schemas(schema: object, problem: str) -> None:
    assert schema_problem(schema) == problem
