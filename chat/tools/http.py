"""The streamable HTTP transport: the SDK's `streamable_http_client`, over an
HTTP client that kvchat sets up for what it must hold:

- the entry's headers, their `${VAR}` read from kvchat's environment now
  (a variable that is not set keeps the server from starting);
- an HTTP error status is kept, since the SDK reports every one as "Server
  returned an error response", and the status (401, 404) is what tells the
  user what to fix;
- one message may be at most `message_limit` bytes: an SSE event is bounded
  by the SDK, a JSON reply by the byte stream here, which stops reading past
  the limit (the call then fails, naming the limit);
- a connection that breaks (the server died mid-reply) sets `ended`: the SDK
  would wait for a reply that cannot come until the call's timeout.

Imported only by chat.tools.connection, when a server is started.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client

from chat.errors import ConfigError
from chat.safe_files import human_limit
from chat.sanitize import sanitize_line
from chat.tools.config import HttpServerConfig
from chat.tools.references import expand
from chat.tools.stdio import StartError

CONNECT_TIMEOUT_S = 30.0
EVENT_STREAM_QUIET_S = 300.0
"""How long a reply's stream may stay quiet before it is read again (the
SDK's own default): a call's own timeout is kept apart from it."""


class MessageTooLarge(httpx2.StreamError):
    """A reply body grew past the limit. The SDK answers the request that it
    was for with an error (a StreamError is what it expects of a body)."""


class HttpTransport:
    """One connection to one HTTP server. `open()` yields the session's streams."""

    def __init__(
        self,
        config: HttpServerConfig,
        environ: Mapping[str, str],
        *,
        message_limit: int,
        read_timeout_s: float,
    ) -> None:
        self.config = config
        self._environ = environ
        self.message_limit = message_limit
        self._read_timeout_s = read_timeout_s
        self.http_error: str | None = None
        """The last HTTP error status the server answered: "HTTP 401 Unauthorized"."""
        self.too_large = False
        """A reply was larger than the limit (and was not read)."""
        self.ended = anyio.Event()
        """Set when a connection to the server broke."""
        self.lost: str | None = None
        """How it broke, in a few words."""

    def connection_broke(self, error: Exception) -> None:
        if self.lost is None:
            why = sanitize_line(str(error) or type(error).__name__)[:200]
            self.lost = f"broke the connection ({why[:1].lower()}{why[1:]})"
        self.ended.set()

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, value in self.config.headers.items():
            try:
                headers[name] = expand(value, self._environ, where=f"the header {name}")
            except ConfigError as error:
                raise StartError(str(error)) from None
        return headers

    def refusal_words(self) -> str:
        """What the server answered, for a message: "HTTP 401 Unauthorized (...)"."""
        words = sanitize_line(self.http_error or "")
        if words.startswith(("HTTP 401", "HTTP 403")):
            words += " (the headers in its entry may be wrong)"
        return words

    def too_large_words(self) -> str:
        return f"sent a reply larger than {human_limit(self.message_limit)}, not read"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[tuple[Any, Any]]:
        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                self.http_error = f"HTTP {response.status_code} {response.reason_phrase}".strip()

        async with (
            httpx2.AsyncClient(
                headers=self.headers(),
                timeout=httpx2.Timeout(
                    CONNECT_TIMEOUT_S, read=max(self._read_timeout_s, EVENT_STREAM_QUIET_S)
                ),
                event_hooks={"response": [note_refusal]},
                transport=_BoundedTransport(self),
            ) as client,
            streamable_http_client(
                self.config.url, http_client=client, max_sse_event_size=self.message_limit
            ) as streams,
        ):
            yield streams


class _BoundedTransport(httpx2.AsyncBaseTransport):
    """The usual HTTP transport, with each JSON reply's body bounded."""

    def __init__(self, owner: HttpTransport) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._owner = owner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        # SSE streams last as long as the session: their events are bounded
        # one by one by the SDK instead.
        bounded = response.headers.get("content-type", "").startswith("application/json")
        response.stream = _WatchedBody(response.stream, self._owner, bounded=bounded)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _WatchedBody(httpx2.AsyncByteStream):
    """A reply's body: bounded (a JSON reply), and watched for a connection
    that breaks in the middle of it."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, owner: HttpTransport, *, bounded: bool
    ) -> None:
        self._inner = inner
        self._owner = owner
        self._bounded = bounded

    async def __aiter__(self) -> AsyncIterator[bytes]:
        got = 0
        try:
            async for chunk in self._inner:
                got += len(chunk)
                if self._bounded and got > self._owner.message_limit:
                    self._owner.too_large = True
                    raise MessageTooLarge(self._owner.too_large_words())
                yield chunk
        except httpx2.TimeoutException:
            # Quiet, not gone: the standalone event stream may see nothing
            # for long, and the SDK opens it again.
            raise
        except httpx2.TransportError as error:
            self._owner.connection_broke(error)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()
