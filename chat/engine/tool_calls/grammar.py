"""GBNF grammars made from JSON Schemas, with llama-cpp-python's converter
(`llama_cpp.llama_grammar.SchemaConverter`, the one behind
`LlamaGrammar.from_json_schema`).

`call_grammar`: what follows a call's opener, for the tools offered: the
call's JSON (`{"name": "<one of them>", "arguments": <its schema>}` in the
family's shape) and its closer; once it is complete llama.cpp allows only
the end of the turn. `schema_grammar`: a whole reply that is one JSON value
of a schema (one-shot mode's `--json-schema`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from chat.engine.tool_calls.calls import ToolDefinition
from chat.engine.tool_calls.syntax import Opener, ToolCallSyntax
from chat.errors import KvchatError
from chat.sanitize import sanitize_line

_WHITESPACE = "[ \\t\\n]{0,3}"


class SchemaGrammarError(KvchatError):
    """A JSON Schema that no grammar can be made from."""


def _converter() -> Any:
    from llama_cpp.llama_grammar import SchemaConverter

    return SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def _visit(converter: Any, schema: Mapping[str, Any], name: str, url: str) -> str:
    """The rule for `schema`, named after `name`; SchemaGrammarError for a
    schema the converter cannot follow (its own errors are asserts and the
    like: any of them)."""
    outside = _outside_reference(schema)
    if outside is not None:
        raise SchemaGrammarError(f"it refers to another document ({_short(outside)}), not fetched")
    try:
        resolved = converter.resolve_refs(json.loads(json.dumps(schema)), url)
        return str(converter.visit(resolved, name))
    except RecursionError:
        raise SchemaGrammarError("it is nested too deeply") from None
    except Exception as error:  # the converter's asserts, KeyErrors, ValueErrors
        raise SchemaGrammarError(_short(str(error) or type(error).__name__)) from None


def _outside_reference(schema: object) -> str | None:
    """The first `$ref` that points outside the schema itself, or None."""
    stack: list[object] = [schema]
    seen = 0
    while stack and seen < 100_000:
        node = stack.pop()
        seen += 1
        if isinstance(node, Mapping):
            reference = node.get("$ref")
            if isinstance(reference, str) and not reference.startswith("#"):
                return reference
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _literal(text: str) -> str:
    return json.dumps(text)  # a GBNF literal is a JSON string, quotes and escapes alike


def call_grammar(syntax: ToolCallSyntax, opener: Opener, tools: Sequence[ToolDefinition]) -> str:
    """The grammar for a call's text after `opener`, one of `tools` (with
    arguments valid for its schema). Raises SchemaGrammarError naming the
    tool whose schema cannot be turned into a grammar."""
    converter = _converter()
    bodies = []
    for index, tool in enumerate(tools):
        try:
            arguments = _visit(converter, tool.parameters, f"tool{index}-args", f"tool{index}")
        except SchemaGrammarError as error:
            raise SchemaGrammarError(
                f"The tool '{sanitize_line(tool.name)}' cannot be called: its input schema "
                f"cannot be made a grammar ({error})."
            ) from None
        key = _literal(json.dumps(syntax.arguments_key))
        bodies.append(
            converter._add_rule(
                f"tool{index}-call",
                f'{_literal(json.dumps(tool.name))} space "," space {key} space ":" space '
                f"{arguments}",
            )
        )
    if not bodies:
        raise SchemaGrammarError("No tool is offered to the model.")
    name_key = _literal(json.dumps("name"))
    body = f'{name_key} space ":" space ({" | ".join(bodies)}) "}}" space'
    converter._add_rule("call-body", body)
    # Llama 3's bare `{` opener is the object's own brace.
    root = "space call-body" if opener.json_lead == "{" else f'{_WHITESPACE} "{{" space call-body'
    if syntax.in_list:
        root = f'{_WHITESPACE} "[" space "{{" space call-body "]"'
    if syntax.closer:
        root += f" {_WHITESPACE} {_literal(syntax.closer)}"
    converter._add_rule("root", root)
    return str(converter.format_grammar())


def arguments_problem(tool: ToolDefinition) -> str | None:
    """Why no grammar can be made from `tool`'s schema (so it cannot be
    offered), in a sentence naming it; None when one can."""
    try:
        _visit(_converter(), tool.parameters, "args", "tool")
    except SchemaGrammarError as error:
        return (
            f"The tool '{sanitize_line(tool.name)}' cannot be called: its input schema "
            f"cannot be made a grammar ({error})."
        )
    return None


def schema_grammar(schema: object) -> str:
    """The grammar of a reply that is one JSON value valid for `schema`.
    Raises SchemaGrammarError saying why the schema cannot be used."""
    if isinstance(schema, bool) or not isinstance(schema, Mapping):
        raise SchemaGrammarError("it is not a JSON Schema object")
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.path) or "the top"
        raise SchemaGrammarError(
            f"it is not valid JSON Schema (at {_short(where)}: {_short(error.message)})"
        ) from None
    except RecursionError:
        raise SchemaGrammarError("it is nested too deeply") from None
    converter = _converter()
    _visit(converter, schema, "", "input")
    return str(converter.format_grammar())


def _short(text: str) -> str:
    shown = sanitize_line(text)
    return shown if len(shown) <= 120 else shown[:117] + "..."
