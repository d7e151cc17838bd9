"""A model server to attach to (`ServerConfig`), and its URL as it may be
recorded or shown: never with a password.

`server.url` may carry a user name and password (`http://me:secret@host`) or a
query (`?key=...`); the engine gets the URL as given, but what is saved with a
conversation, exported or printed goes through one of these first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

ServerKind = Literal["auto", "llama-server", "vllm", "ollama", "openai"]


@dataclass(frozen=True)
class ServerConfig:
    """What `chat.engine.remote.connect` attaches to (built from the `[server]`
    settings by `chat.session.server_choice`)."""

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
    n_ctx: int | None = None
    """The model's window, for a server that does not say it (a generic
    OpenAI-compatible one); for Ollama, the `num_ctx` asked for. None: the
    server's own (see `ModelInfo.n_ctx_source`)."""

    def display_name(self) -> str:
        """`model at http://host:port`, or the URL alone (never a password)."""
        where = public_url(self.url) or "the server"
        return f"{self.model} at {where}" if self.model else where


def _split_netloc(url: str) -> tuple[str, str, str, str, str] | None:
    """(scheme, userinfo, host and port, path, the rest) or None for no URL."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # an unbalanced [ in the host
        return None
    userinfo, _, host = parts.netloc.rpartition("@")
    rest = ("?" + parts.query if parts.query else "") + (
        "#" + parts.fragment if parts.fragment else ""
    )
    return parts.scheme, userinfo, host, parts.path, rest


def public_url(url: str) -> str:
    """The URL to record (saved conversations, exports, one-shot JSON): scheme,
    host, port and path only; no user name, password, query or fragment.
    Anything that is not a URL with a host records as ""."""
    split = _split_netloc(url)
    if split is None or not split[2]:
        return ""
    scheme, _, host, path, _ = split
    return urlunsplit((scheme.lower(), host, path, "", ""))


def url_for_display(url: str) -> str:
    """The URL as `--print-config` shows it: a password becomes `***` (the user
    name and the rest stay, so that the user sees what is in effect)."""
    split = _split_netloc(url)
    if split is None or ":" not in split[1]:
        return url
    scheme, userinfo, host, path, rest = split
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}{path}{rest}"
