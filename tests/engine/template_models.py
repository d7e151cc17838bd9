"""Real models with another chat template: a copy of the demo GGUF whose
`tokenizer.chat_template` is rewritten with the `gguf` package (published by
llama.cpp), the way its `gguf-new-metadata` script does it."""

from __future__ import annotations

from chat.bench.tools import with_chat_template

__all__ = ["with_chat_template"]
