"""Whether a tool's input schema can be used.

A tool is offered to the model with its schema, and later the arguments are
generated under a grammar made from it, so a schema that is not a valid JSON
Schema object cannot be used. Such a tool is still listed (the user sees it
and why), marked unusable. `jsonschema` comes with the `mcp` SDK and, like
it, is imported only when a server is running.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chat.safe_files import human_limit
from chat.sanitize import sanitize_line

SCHEMA_LIMIT = 64 * 1024
"""The largest input schema used, as JSON: each is sent to the model with
every prompt, so one this large would fill a small context window alone."""
_MAX_NODES = 10_000
"""Bounds the walk over a schema for its `$ref`s (a hostile one may be wide)."""


def schema_problem(schema: object) -> str | None:
    """Why `schema` cannot be a tool's input schema, in a few words, or None."""
    if not isinstance(schema, Mapping):
        return "its input schema is not a JSON object"
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        return "its input schema is not JSON"
    if size > SCHEMA_LIMIT:
        return f"its input schema is larger than {human_limit(SCHEMA_LIMIT)}"
    if schema.get("type") != "object":
        return 'its input schema is not of "type": "object"'
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.path) or "the top"
        why = f"at {_short(where)}: {_short(error.message)}"
        return f"its input schema is not valid JSON Schema ({why})"
    except RecursionError:
        return "its input schema is nested too deeply"
    return _reference_problem(schema)


def _reference_problem(schema: Mapping[str, Any]) -> str | None:
    """A `$ref` that points at nothing in the schema, or outside it."""
    stack: list[object] = [schema]
    seen = 0
    while stack and seen < _MAX_NODES:
        node = stack.pop()
        seen += 1
        if isinstance(node, Mapping):
            reference = node.get("$ref")
            if isinstance(reference, str):
                if not reference.startswith("#"):
                    return f"its input schema refers to another document ({_short(reference)})"
                if not _resolves(schema, reference[1:]):
                    return f"its input schema's $ref {_short(reference)} points at nothing"
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _resolves(schema: Mapping[str, Any], pointer: str) -> bool:
    """Whether the JSON pointer (after the '#') names a part of `schema`."""
    node: object = schema
    if not pointer:
        return True
    if not pointer.startswith("/"):
        return True  # a `$anchor` name: left to the validator
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _short(text: str) -> str:
    shown = sanitize_line(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."
