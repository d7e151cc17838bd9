"""From the `[server]` settings to what `chat.engine.remote.connect` needs.

The API key is never a setting: `server.api_key_env` names the environment
variable that holds it, and its value is read here, at the moment of
connecting, into `ServerConfig.api_key` (which is never stored, printed, logged
or exported; its repr leaves it out).

A variable that is named but not set (or empty) is refused here, with a
sentence naming it, rather than sending no key and letting the server answer
401: the user asked for a key, so its absence is almost surely a forgotten
`export`, and the fix is clearest before any request is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from chat.engine.remote import ServerConfig, ServerKind
from chat.errors import ConfigError
from chat.settings.schema import SERVER_KINDS, ServerSettings
from chat.settings.server import credentials_for, read_url


class ApiKeyMissingError(ConfigError):
    """`server.api_key_env` names a variable that is not set; `variable` is its name."""

    def __init__(self, variable: str) -> None:
        self.variable = variable
        super().__init__(
            f"The server's API key should be in the environment variable {variable} "
            "(server.api_key_env), but it is not set. Set it (export "
            f"{variable}=...), or clear server.api_key_env to send no key."
        )


def server_config(settings: ServerSettings, environ: Mapping[str, str]) -> ServerConfig | None:
    """The server to connect to, with its API key read from `environ`; None when
    `settings.url` is blank (the local model is used).

    Raises `ApiKeyMissingError` when `settings.api_key_env` names a variable
    that is unset or blank in `environ`.
    """
    if not settings.url:
        return None
    api_key: str | None = None
    if settings.api_key_env:
        api_key = environ.get(settings.api_key_env, "").strip()
        if not api_key:
            raise ApiKeyMissingError(settings.api_key_env)
    kind = settings.kind if settings.kind in SERVER_KINDS else "auto"
    # The setting holds the URL without credentials (they were taken out when
    # it was read, `read_url`); those given for this server go as basic auth.
    url = read_url(settings.url)
    return ServerConfig(
        url=url,
        auth=credentials_for(url),
        kind=cast(ServerKind, kind),
        model=settings.model or None,
        api_key=api_key,
        api_key_env=settings.api_key_env or None,
        connect_timeout_s=settings.connect_timeout_s,
        read_timeout_s=settings.read_timeout_s,
    )
