"""The presets kvchat comes with, written as a preset file reads once parsed.

They go through the same checks as the user's files (chat.settings.presets),
so a mistake here is caught by the tests like a mistake in a user's file. A
user file with one of these names replaces it.
"""

from __future__ import annotations

from typing import Any

DEFAULT_PRESET = "default"

BUILTIN_PRESETS: tuple[dict[str, Any], ...] = (
    {
        # No system_prompt and no [sampling]: the settings of config.toml and
        # the settings pane, unchanged. Choosing it undoes another preset.
        "name": DEFAULT_PRESET,
        "description": "your own system prompt and sampling settings (config.toml, F2)",
    },
    {
        "name": "concise",
        "description": "short, direct answers",
        "system_prompt": (
            "You are a helpful assistant. Answer in as few words as the question "
            "allows: no preamble, no repetition, no closing summary."
        ),
        "sampling": {"temperature": 0.5},
    },
    {
        "name": "coder",
        "description": "code first, low temperature",
        "system_prompt": (
            "You are an expert programmer. Answer with correct, idiomatic code in "
            "fenced code blocks that name their language, and explain briefly only "
            "what is not obvious from the code."
        ),
        # Code has one right token far more often than prose: stay near greedy.
        "sampling": {"temperature": 0.2, "min_p": 0.1},
    },
    {
        "name": "creative",
        "description": "stories and ideas, high temperature",
        "system_prompt": (
            "You are an imaginative writer. Be vivid and original, vary the rhythm "
            "of your sentences, and prefer the unexpected detail to the obvious one."
        ),
        "sampling": {"temperature": 1.1, "top_p": 0.98, "min_p": 0.02, "repeat_penalty": 1.1},
    },
)
