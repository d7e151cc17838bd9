"""Which kind of server answers at a URL, from what only that kind serves:
- llama-server: `GET /props` with `default_generation_settings`;
- Ollama: `GET /api/version` and `GET /api/tags`;
- vLLM: `GET /version` and a `/v1/models` whose entries carry `max_model_len`;
- any other OpenAI-compatible server: a `/v1/models` list.
Ollama and llama-server also serve `/v1/models`, so they are asked first.
"""

from __future__ import annotations

from typing import Any

from chat.engine.remote.engine import RemoteEngine, served_models
from chat.engine.remote.http import ServerHttp
from chat.engine.remote.llama_server import LlamaServerEngine
from chat.engine.remote.ollama import OllamaEngine
from chat.engine.remote.openai import OpenAIEngine
from chat.engine.remote.vllm import VllmEngine
from chat.errors import ServerError


def open_engine(http: ServerHttp) -> RemoteEngine:
    """The engine for the server at `http.url`, of `config.kind` or detected."""
    kind = http.config.kind
    if kind in ("auto", "llama-server"):
        props = http.get_json("/props", missing_ok=kind == "auto")
        if _is_llama_server(props) or kind == "llama-server":
            if not isinstance(props, dict):
                raise ServerError(f"The server at {http.url} is not a llama-server (no /props).")
            return LlamaServerEngine(http, props, http.get_json("/v1/models", missing_ok=True))
    if kind in ("auto", "ollama"):
        version = http.get_json("/api/version", missing_ok=kind == "auto")
        if (isinstance(version, dict) and "version" in version) or kind == "ollama":
            return OllamaEngine(http, http.get_json("/api/tags"))
    models = http.get_json("/v1/models", missing_ok=kind == "auto")
    if models is None:
        raise ServerError(
            f"The server at {http.url} is not a model server kvchat knows "
            "(llama-server, vLLM, Ollama or OpenAI-compatible): it has no /v1/models."
        )
    if kind == "vllm" or (kind == "auto" and _is_vllm(http, models)):
        return VllmEngine(http, models)
    return OpenAIEngine(http, models)


def _is_llama_server(props: Any) -> bool:
    return isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict)


def _is_vllm(http: ServerHttp, models: Any) -> bool:
    entries = served_models(models)
    if not entries or not all("max_model_len" in e for e in entries):
        return False
    version = http.get_json("/version", missing_ok=True)
    return isinstance(version, dict) and "version" in version
