"""Real models with another chat template: a copy of the demo GGUF whose
`tokenizer.chat_template` is rewritten (chat.models.template_copy, which
the benchmark uses too)."""

from __future__ import annotations

from chat.models.template_copy import with_chat_template

__all__ = ["with_chat_template"]
