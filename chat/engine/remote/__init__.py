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
  the served models in `UnknownServerModelError.models`). Whatever the
  server said (model names, its error text) is one safe line by then;
  nothing names the URL's credentials (see `chat.settings.server`). Facts
  about httpx these rely on: docs/servers.md.
- A reply whose connection drops (or whose stream breaks) after some text
  ends with a `Finished` whose finish reason is "error" and whose `error`
  says why: the text so far is kept. Before any text, the error is raised.
- `ModelInfo` says where the window comes from (`n_ctx_source`, `n_ctx_known`)
  and whether counts are exact (`count_exact`: llama-server and vLLM count
  with the server's tokenizer; Ollama and generic servers are estimated).
- Tools go through the server's API (`ModelInfo.api_tool_calls`); a server
  that cannot take them says why in `ModelInfo.no_tools_reason`, and a reply
  asked with tools then raises `KvchatError` with that sentence, before any
  request (docs/tools.md, "How a model server calls a tool").

Modules: `http` (requests, streamed lines, faults), `detect` (which kind),
`engine` (what every kind shares), one module per kind, `estimate` and
`probs` (counts and probabilities as servers give them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chat.settings.schema import SERVER_KINDS as SERVER_KINDS
from chat.settings.server import ServerConfig as ServerConfig
from chat.settings.server import ServerKind as ServerKind

if TYPE_CHECKING:
    from chat.engine.protocol import Engine


def connect(config: ServerConfig) -> Engine:
    """An `Engine` for the model served at `config.url`: the server's kind
    detected (unless `config.kind` names it), its window and model read.

    Raises `ServerUnreachableError` (naming the URL) when nothing answers,
    `ServerAuthError` on 401/403, `UnknownServerModelError` when
    `config.model` is not served, `ServerError` for anything else.

    The engine has, besides `Engine`'s methods: `ignored_settings` (names of
    the `SamplingSettings` this kind of server does not take) and
    `probs_note` (None, or why token probabilities cannot be recorded); vLLM's
    also `reuse_note` (None, or why its replies go back as text, not as
    their sampled ids: the server refused token-id prompts).
    """
    # Imported here: httpx and the engines cost startup time an app without
    # a server should not pay.
    from chat.engine.remote.detect import open_engine
    from chat.engine.remote.http import ServerHttp

    http = ServerHttp(config)
    try:
        return open_engine(http)
    except BaseException:
        http.close()
        raise
