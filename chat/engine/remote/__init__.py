"""Engines that talk to a model server instead of loading a model in process.

`connect(config)` detects the server's kind (llama.cpp's llama-server, vLLM,
Ollama, any other OpenAI-compatible server) unless `config.kind` forces one,
reads its context window and model, and returns an `Engine` for it. The HTTP
library is imported only here, so startup without a server does not pay for it.

Contract used by the rest of kvchat (settings, CLI, loader):
- `ServerConfig` carries the API key's *value*, read by the caller from the
  environment variable the settings name; it is never stored or shown.
- `connect` raises `chat.errors.ServerError` subclasses with a sentence for the
  user (naming the URL; for 401/403 the variable to set; for an unknown model
  the served models in `UnknownServerModelError.models`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ServerKind = Literal["auto", "llama-server", "vllm", "ollama", "openai"]
SERVER_KINDS: tuple[str, ...] = ("auto", "llama-server", "vllm", "ollama", "openai")


@dataclass(frozen=True)
class ServerConfig:
    url: str
    """Base URL, e.g. http://127.0.0.1:8080 (a trailing /v1 is accepted)."""
    kind: ServerKind = "auto"
    model: str | None = None
    """The served model to use; None: the server's only (or first) model."""
    api_key: str | None = field(default=None, repr=False)
    """The key's value (never logged, stored or shown)."""
    api_key_env: str | None = None
    """The environment variable the key came from, named in error messages."""
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 300.0
    """Longest wait for the next bytes of a reply (a long prompt may take a while)."""
