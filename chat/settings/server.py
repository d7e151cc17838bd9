"""A model server to attach to (`ServerConfig`), and its URL as it may be
recorded or shown: never with a user name or password.

A URL may be written with credentials (`http://me:secret@host`). They are
taken out where the URL is read (`read_url`: the settings' `server.url`
from any source; `ServerConfig` itself), so that no setting, record, export,
status line or error message holds them. They are kept in this process only,
for the server they were given for (its scheme, host and port), and sent to it
as HTTP basic auth (`ServerConfig.auth`). A query (`?key=...`) stays in the
URL the engine uses but is left out of what is recorded (`public_url`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

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
    auth: tuple[str, str] | None = field(default=None, repr=False)
    """User name and password for HTTP basic auth (never logged, stored or
    shown). Credentials written into `url` are moved here."""

    def __post_init__(self) -> None:
        url, credentials = split_credentials(self.url)
        if credentials is not None:
            object.__setattr__(self, "url", url)
            if self.auth is None:
                object.__setattr__(self, "auth", credentials)

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
    """The URL as `--print-config` shows it: credentials (given in it, or taken
    out of it when it was read) show as `***`; the rest stays, so that the user
    sees what is in effect."""
    bare, given = split_credentials(url)
    if given is None and credentials_for(bare) is None:
        return url
    split = _split_netloc(bare)
    if split is None or not split[2]:
        return bare
    scheme, _, host, path, rest = split
    return f"{scheme}://***@{host}{path}{rest}"


_USERINFO = re.compile(r"^(\s*[A-Za-z][A-Za-z0-9+.-]*:/{1,2})([^/?#]*)@")
"""The user name and password of a URL: up to the last @ before the path, as
`urlsplit` reads it (a password may hold an unescaped @). One slash is enough:
a URL made a `Path` (a served model's `ModelInfo.path`) has lost the other."""
_remembered: dict[str, tuple[str, str]] = {}
_remembered_lock = threading.Lock()


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """`url` without its user name and password, and those (decoded), or None
    when it has none. Works on any text, a URL or not, so that even a value
    that is refused can be shown without them."""
    match = _USERINFO.match(url)
    if match is None:
        return url, None
    user, _, password = match.group(2).partition(":")
    return match.group(1) + url[match.end() :], (unquote(user), unquote(password))


def _origin(url: str) -> str:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port or default}"


def read_url(url: str) -> str:
    """`url` as a setting holds it: its credentials taken out and remembered
    for its server (`credentials_for`), for this process only."""
    bare, credentials = split_credentials(url)
    if credentials is not None:
        with _remembered_lock:
            _remembered[_origin(bare)] = credentials
    return bare


def credentials_for(url: str) -> tuple[str, str] | None:
    """The credentials a URL for the same server (scheme, host and port) was
    read with, if any."""
    with _remembered_lock:
        return _remembered.get(_origin(url))


def url_as_saved(url: str, in_file: str | None) -> str:
    """`url` as the config file is to hold it: the file's own spelling when
    that is the same URL with credentials the user wrote there (saving the
    settings must not drop them), else `url`, which holds none: kvchat never
    writes credentials into a file that did not hold them."""
    if in_file is not None and split_credentials(in_file.strip())[0] == url:
        return in_file.strip()
    return url


def forget_credentials() -> None:
    """Forget every server's credentials (a test starts afresh with this)."""
    with _remembered_lock:
        _remembered.clear()
