"""How a model writes a tool call, read from the model itself: its chat
template's text (a template that renders `tools` and shows calls as
`<tool_call>` teaches its model that syntax) and its vocabulary (the
markers that are special tokens), never its name, as chat.engine.reasoning
does for thinking. The families are those llama.cpp's chat parsers know
best and that most tool-calling GGUFs use (docs/tools.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Opener:
    """Text that begins a call."""

    text: str
    at_start: bool = False
    """Only at the very start of a reply (after whitespace), as Llama 3's
    bare `{`; otherwise anywhere in the reply."""
    json_lead: str = ""
    """The part of `text` that is already the call's JSON (`{`)."""


@dataclass(frozen=True)
class ToolCallSyntax:
    """One family's way of writing calls."""

    family: Literal["hermes", "llama3", "mistral"]
    openers: tuple[Opener, ...]
    closer: str = ""
    """Text written after the call's JSON (`</tool_call>`), or none."""
    arguments_key: str = "arguments"
    """The key the arguments object goes under (Llama 3: `parameters`)."""
    in_list: bool = False
    """The calls are a JSON list (Mistral's `[TOOL_CALLS][{...}]`)."""


HERMES = ToolCallSyntax("hermes", (Opener("<tool_call>"),), closer="</tool_call>")
"""Hermes 2 Pro and 3, Qwen 2.5 and 3, and the many templates that copied
them: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`."""
LLAMA3 = ToolCallSyntax(
    "llama3",
    (Opener("<|python_tag|>"), Opener("{", at_start=True, json_lead="{")),
    arguments_key="parameters",
)
"""Llama 3.1 to 3.3: a reply that is only `{"name": ..., "parameters": {...}}`
(or that follows `<|python_tag|>`)."""
MISTRAL = ToolCallSyntax("mistral", (Opener("[TOOL_CALLS]"),), in_list=True)
"""Mistral (v3 tokenizer: Nemo, Small): `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`."""


def find_syntax(
    template: str | None, is_special_token: Callable[[str], bool] = lambda _: False
) -> ToolCallSyntax | None:
    """The call syntax of a model whose chat template is `template`; None
    when the template does not render `tools` (the model was not shown how
    to call, so kvchat does not offer it tools) or names no known syntax."""
    if not template or "tools" not in template:
        return None
    if "<tool_call>" in template:
        return HERMES
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<|python_tag|>" in template or '"parameters": ' in template:
        return LLAMA3
    if is_special_token("<tool_call>") and is_special_token("</tool_call>"):
        return HERMES
    if is_special_token("[TOOL_CALLS]"):
        return MISTRAL
    if is_special_token("<|python_tag|>"):
        return LLAMA3
    return None
