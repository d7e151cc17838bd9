"""Reasoning test models: no reasoning model can be downloaded here, so the
demo model plays one. A copy of its GGUF carries a real reasoning chat
template, and a GBNF grammar makes its own tokens take the thinking-then-
answer shape (`<think>` thought `</think>` answer), as a reasoning model's do.
"""

from __future__ import annotations

from pathlib import Path

from chat.bench.thinking import TEMPLATE as BENCH_QWEN3_TEMPLATE
from tests.engine.template_models import with_chat_template

TEMPLATES = Path(__file__).parent / "templates"
QWEN3_TEMPLATE = BENCH_QWEN3_TEMPLATE.read_text(encoding="utf-8")
"""Qwen3's chat template as published with the models (tokenizer_config.json):
the model opens `<think>` itself; `enable_thinking=false` closes an empty
block in the generation prompt; earlier turns' thinking is dropped."""
DEEPSEEK_R1_TEMPLATE = (TEMPLATES / "deepseek-r1.jinja").read_text(encoding="utf-8")
"""DeepSeek-R1's (the distills' tokenizer_config.json, as llama.cpp keeps it
in models/templates): the generation prompt itself opens the block, so the
reply holds only `</think>`; earlier answers are re-sent without their thinking."""

_THOUGHT_AND_ANSWER = """
thought ::= [a-z] [a-z ,.]{8,120}
answer ::= [A-Z] [a-z ,.]{4,80}
"""
THINKING_GRAMMAR = 'root ::= "<think>\\n" thought "\\n</think>\\n\\n" answer' + _THOUGHT_AND_ANSWER
"""A reply that opens its own block (Qwen3's template)."""
OPENED_GRAMMAR = 'root ::= thought "\\n</think>\\n\\n" answer' + _THOUGHT_AND_ANSWER
"""A reply whose block the prompt opened (DeepSeek-R1's): only the close."""


def qwen3_model(demo_model: Path, folder: Path) -> Path:
    return with_chat_template(demo_model, folder / "qwen3-think.gguf", QWEN3_TEMPLATE)


def deepseek_r1_model(demo_model: Path, folder: Path) -> Path:
    return with_chat_template(demo_model, folder / "r1-think.gguf", DEEPSEEK_R1_TEMPLATE)
