"""A tool as the model is told of it, and a call the model made."""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    """An id for a call: nine letters and digits, the one shape every chat
    template accepts (Mistral's refuses any other length)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(9))


@dataclass(frozen=True)
class ToolDefinition:
    """One tool offered to the model: `name` as the model must write it,
    `parameters` its JSON Schema for the arguments (an object)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def for_template(self) -> dict[str, Any]:
        """OpenAI's shape, the one chat templates read (`tools`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """A call the model wrote: the tool's name and its arguments (a JSON
    object, already checked against the tool's grammar when it was sampled)."""

    name: str
    arguments: Mapping[str, Any]
    id: str = field(default_factory=new_call_id)

    def for_template(self) -> dict[str, Any]:
        """OpenAI's shape of an assistant message's `tool_calls` entry, with
        the arguments as an object (templates write them with `tojson`)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": dict(self.arguments)},
        }
