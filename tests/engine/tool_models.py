"""Tool-calling test models: no tool-calling model can be downloaded here,
so the demo model plays one. A copy of its GGUF carries a real tool-calling
chat template (as llama.cpp keeps them in its models/templates), and a GBNF
grammar makes its own tokens begin a call; from the call's opener on, the
engine's own grammar (made from the tools' schemas) takes over.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chat.bench.tools import QWEN25_TEMPLATE as BENCH_QWEN25_TEMPLATE
from chat.conversations.conversation import ReplyStats
from chat.engine.kv_state import common_prefix
from chat.engine.tool_calls.calls import ToolDefinition
from tests.engine.template_models import with_chat_template

TEMPLATES = Path(__file__).parent / "templates"
QWEN25_TEMPLATE = BENCH_QWEN25_TEMPLATE.read_text(encoding="utf-8")
"""Qwen2.5-Instruct's (kept in chat/bench, whose tool loop runs it too):
tools in the system message, calls as Hermes' `<tool_call>{json}</tool_call>`,
results as `<tool_response>` in a user turn."""
LLAMA31_TEMPLATE = (TEMPLATES / "llama-3.1.jinja").read_text(encoding="utf-8")
"""Llama 3.1 Instruct's: tools in the first user message, a call is a reply
of JSON alone with `parameters`, results in an `ipython` turn."""
MISTRAL_TEMPLATE = (TEMPLATES / "mistral-nemo.jinja").read_text(encoding="utf-8")
"""Mistral Nemo's: `[AVAILABLE_TOOLS]`, calls as `[TOOL_CALLS][{...}]`,
ids of nine letters and digits."""

OPENS_HERMES_CALL = 'root ::= [A-Z] [a-z ]{3,24} "\\n<tool_call>" [^<]*'
"""A few words, then the call's opener (the engine's grammar does the rest)."""
OPENS_LLAMA3_CALL = 'root ::= "{" [^<]*'
OPENS_MISTRAL_CALL = 'root ::= "[TOOL_CALLS]" [^<]*'

TIME_TOOL = ToolDefinition(
    "get_current_time",
    "The current time in a time zone.",
    {
        "type": "object",
        "properties": {
            "timezone": {"type": "string", "enum": ["Europe/Paris", "Asia/Tokyo", "UTC"]}
        },
        "required": ["timezone"],
    },
)
ADD_TOOL = ToolDefinition(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
TOOLS = (TIME_TOOL, ADD_TOOL)


def qwen25_model(demo_model: Path, folder: Path) -> Path:
    return with_chat_template(demo_model, folder / "qwen25-tools.gguf", QWEN25_TEMPLATE)


def llama31_model(demo_model: Path, folder: Path) -> Path:
    return with_chat_template(demo_model, folder / "llama31-tools.gguf", LLAMA31_TEMPLATE)


def mistral_model(demo_model: Path, folder: Path) -> Path:
    return with_chat_template(demo_model, folder / "mistral-tools.gguf", MISTRAL_TEMPLATE)


def schema_of(tool_name: str) -> dict[str, Any]:
    return dict(next(t for t in TOOLS if t.name == tool_name).parameters)


def assert_step_after_a_call_reuses_the_cache(
    engine: Any,
    question: Sequence[Any],
    added: Sequence[Any],
    definitions: Sequence[ToolDefinition],
    step: ReplyStats,
) -> tuple[list[int], list[int]]:
    """The step after a call (`step`, whose prompt is `question` and the
    call and result `added`) was counted exactly, and evaluated no more than
    what its prompt has beyond the first step's: that one stayed in the KV
    cache. Returns both prompts."""
    prompt1 = engine.tokenize_chat(question, tools=definitions)
    prompt2 = engine.tokenize_chat([*question, *added], tools=definitions)
    assert common_prefix(prompt1, prompt2) == len(prompt1)
    assert step.prompt_tokens == len(prompt2)
    assert step.prompt_evaluated <= len(prompt2) - len(prompt1)
    return prompt1, prompt2
