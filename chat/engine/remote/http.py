"""HTTP to a model server: requests whose failures become `ServerError`s with
a sentence for the user, and streamed replies read line by line.

The one place httpx is used. Rules kept here for every server kind:
- the API key goes only into the `Authorization: Bearer` header; it is never
  part of a message, a repr or a log line (httpx's own errors do not carry
  headers, and every message here is built from the URL and status only);
- credentials given in the URL (`ServerConfig.auth`) go as basic auth, only
  when there is no API key (one `Authorization` header), and the URL named in
  messages is `public_url`'s: no user name, password or query;
- redirects are not followed (the key or password would go to wherever one
  points): one is reported, with where it pointed;
- TLS certificates are verified (httpx's default);
- whatever the server says is untrusted: lines are capped (`MAX_LINE_BYTES`),
  JSON is checked for shape, and its text is sanitized before anyone shows it;
- a cancelled reply shuts the connection down, which wakes a read blocked on
  it at once and tells the server to stop generating.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import httpx

from chat.engine.remote import ServerConfig
from chat.errors import (
    ServerAuthError,
    ServerError,
    ServerRefusedError,
    ServerUnreachableError,
)
from chat.sanitize import sanitize, sanitize_line
from chat.settings.server import public_url, split_credentials

MAX_LINE_BYTES = 1 << 20
"""One streamed line (one event) longer than this is refused: no server sends
events that size, and reading on would let a broken one fill memory."""
MAX_JSON_BYTES = 16 << 20
"""An answer that is one JSON document (a model list, a tokenized chat) longer
than this is refused: a model list of that size is not one."""
_MAX_SHOWN = 300
"""How much of a server's own error message goes into ours."""
_CANCEL_POLL_S = 0.05


def base_url(url: str) -> str:
    """`url` without a trailing slash or `/v1` (paths are added per kind)."""
    url = url.strip().rstrip("/")
    return url.removesuffix("/v1")


class ServerHttp:
    """An httpx client for one server, with the config's key and timeouts."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        address = base_url(config.url)
        # The server as messages and records name it.
        self.url = public_url(address) or address
        headers = {"Accept": "application/json"}
        auth = None
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        elif config.auth is not None:
            auth = httpx.BasicAuth(*config.auth)
        self._client = httpx.Client(
            base_url=address,
            headers=headers,
            auth=auth,
            follow_redirects=False,
            timeout=httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s),
        )

    def __repr__(self) -> str:
        return f"ServerHttp({self.url!r})"

    def close(self) -> None:
        self._client.close()

    def get_json(self, path: str, *, missing_ok: bool = False) -> Any:
        """GET `path` as JSON; None for a 404/405 when `missing_ok` (probing)."""
        return self._json("GET", path, None, missing_ok)

    def post_json(self, path: str, body: dict[str, Any], *, missing_ok: bool = False) -> Any:
        return self._json("POST", path, body, missing_ok)

    def _json(self, method: str, path: str, body: dict[str, Any] | None, missing_ok: bool) -> Any:
        try:
            with self._client.stream(method, path, json=body) as response:
                data = self._read_capped(response, path)
        except httpx.HTTPError as error:
            raise self.transport_error(error) from None
        if missing_ok and response.status_code in (404, 405, 501):
            return None
        self.check_status(response, path, data)
        try:
            return json.loads(data)
        except ValueError:
            if missing_ok:  # an HTML page or plain text where JSON was probed for
                return None
            raise ServerError(
                f"The server at {self.url} answered {path} with something that is not JSON."
            ) from None

    def _read_capped(self, response: httpx.Response, path: str) -> bytes:
        """The body (decoded as its Content-Encoding says), refused when over
        `MAX_JSON_BYTES` rather than let a broken server fill memory."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_JSON_BYTES:
                raise ServerError(
                    f"The server at {self.url} answered {path} with over "
                    f"{MAX_JSON_BYTES >> 20} MiB; kvchat stopped reading."
                )
            chunks.append(chunk)
        return b"".join(chunks)

    @contextlib.contextmanager
    def stream(
        self, path: str, body: dict[str, Any], cancel: threading.Event
    ) -> Iterator[Iterator[bytes]]:
        """POST `body` and yield the reply's lines (without line endings, each
        at most MAX_LINE_BYTES). Setting `cancel` shuts the connection down: a
        read waiting on it ends at once (the lines simply stop)."""
        try:
            with self._client.stream("POST", path, json=body) as response:
                if response.status_code >= 300:
                    self.check_status(response, path, self._read_capped(response, path))
                with _shut_down_when(response, cancel):
                    yield self._lines(response, cancel)
        except httpx.HTTPError as error:
            if cancel.is_set():
                return  # our own shutdown
            raise self.transport_error(error) from None

    def _lines(self, response: httpx.Response, cancel: threading.Event) -> Iterator[bytes]:
        buffer = b""
        try:
            for chunk in response.iter_bytes():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield _checked(line.rstrip(b"\r"), self.url)
                if len(buffer) > MAX_LINE_BYTES:
                    _checked(buffer, self.url)
        except httpx.HTTPError as error:
            if cancel.is_set():
                return
            raise self.transport_error(error) from None
        if buffer.strip() and not cancel.is_set():
            yield _checked(buffer, self.url)

    def transport_error(self, error: httpx.HTTPError) -> ServerError:
        """A sentence for a failure below HTTP (no connection, a timeout, a drop)."""
        if isinstance(error, httpx.ConnectTimeout):
            return ServerUnreachableError(
                f"The server at {self.url} did not accept a connection within "
                f"{self.config.connect_timeout_s:g} s. Is it running?"
            )
        if isinstance(error, httpx.ConnectError) and _certificate_refused(error):
            return ServerError(
                f"The server at {self.url} presented a TLS certificate that could not be "
                "verified, so kvchat did not send anything to it. If it is yours with a "
                "private certificate authority, point SSL_CERT_FILE at that authority's "
                "certificate."
            )
        if isinstance(error, httpx.ConnectError):
            return ServerUnreachableError(
                f"Nothing answers at {self.url}. Start the server, or check the URL."
            )
        if isinstance(error, httpx.ReadTimeout):
            return ServerUnreachableError(
                f"The server at {self.url} sent nothing for {self.config.read_timeout_s:g} s."
            )
        if isinstance(error, httpx.RemoteProtocolError) and _not_http(error):
            # Something answered, but not a model server: no "is it running?".
            return ServerError(
                f"The server at {self.url} answered with something that is not HTTP. "
                "Check the URL and port."
            )
        if isinstance(error, httpx.RemoteProtocolError) and "without sending a response" in str(
            error
        ):
            return ServerUnreachableError(
                f"The server at {self.url} accepted the connection but closed it without answering."
            )
        if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return ServerUnreachableError(f"The connection to the server at {self.url} dropped.")
        return ServerError(f"Talking to the server at {self.url} failed ({type(error).__name__}).")

    def check_status(self, response: httpx.Response, path: str, body: bytes) -> None:
        status = response.status_code
        if status < 300:
            return
        if status < 400:
            raise ServerError(
                f"The server at {self.url} answered {path} with a redirect ({status}) to "
                f"{redirect_target(response)}, which kvchat does not follow. If that is "
                "the server, use its URL."
            )
        if status in (401, 403):
            variable = self.config.api_key_env
            if self.config.api_key:
                what = "refused the API key"
                todo = f"Check the key in {variable}." if variable else "Check the API key."
            else:
                what = "needs an API key"
                todo = f"Set {variable} to the key." if variable else "Set the API key."
            raise ServerAuthError(f"The server at {self.url} {what} ({status}). {todo}")
        said = server_message(body)
        detail = f": {said}" if said else "."
        raise ServerRefusedError(
            f"The server at {self.url} answered {path} with {status}{detail}", status
        )


def redirect_target(response: httpx.Response) -> str:
    """Where a redirect points, safe to show: no credentials or query, one line."""
    location = response.headers.get("location", "").strip()
    if not location:
        return "no address"
    bare = split_credentials(location)[0]
    return sanitize_line(public_url(bare) or bare.partition("?")[0])[:_MAX_SHOWN]


def _not_http(error: httpx.RemoteProtocolError) -> bool:
    """Whether the bytes that came back were not an HTTP response at all (h11
    names them "illegal" or "malformed"), rather than a connection cut short."""
    said = str(error)
    return "illegal" in said or "malformed" in said or "invalid" in said.lower()


def server_message(body: bytes) -> str:
    """The server's own error text (from its answer's `body`), made safe to
    show and short."""
    try:
        said = json.loads(body)
    except ValueError:
        text = body[: _MAX_SHOWN * 4].decode("utf-8", "replace")
    else:
        text = error_text(said) or ""
    return sanitize(" ".join(text.split()))[:_MAX_SHOWN]


def error_text(body: Any) -> str | None:
    """The message of an error object, in the shapes servers use:
    {"error": {"message": ...}}, {"error": "..."}, {"message": ...}, {"detail": ...}."""
    if not isinstance(body, dict):
        return None
    error = body.get("error", body)
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        for key in ("message", "detail"):
            if isinstance(error.get(key), str):
                return str(error[key])
    return None


def _checked(line: bytes, url: str) -> bytes:
    if len(line) > MAX_LINE_BYTES:
        raise ServerError(
            f"The server at {url} sent a line of over {MAX_LINE_BYTES // 1024:,} KiB; "
            "the reply was abandoned."
        )
    return line


def parse_json_line(line: bytes, url: str) -> dict[str, Any]:
    """One event's JSON object; a `ServerError` when it is not one."""
    try:
        value = json.loads(line)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ServerError(f"The server at {url} sent a malformed line; the reply was abandoned.")
    said = error_text(value) if "error" in value else None
    if said is not None:
        shown = sanitize(" ".join(said.split()))[:_MAX_SHOWN]
        raise ServerError(f"The server at {url} failed mid-reply: {shown}")
    return value


def sse_data(lines: Iterator[bytes]) -> Iterator[bytes]:
    """The `data:` payloads of a server-sent event stream, up to `[DONE]`.
    Comments (`: ping`), event names and blank lines carry nothing we use."""
    for line in lines:
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            if payload:
                yield payload
        elif line.startswith(b"error:"):  # some servers name an error event this way
            yield line[6:].strip()


@contextlib.contextmanager
def _shut_down_when(response: httpx.Response, cancel: threading.Event) -> Iterator[None]:
    """While the block runs, `cancel` shuts the response's connection down."""
    done = threading.Event()
    watcher = threading.Thread(
        target=_shut_down_on_cancel,
        args=(response, cancel, done),
        name="kvchat-cancel-watch",
        daemon=True,
    )
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _shut_down_on_cancel(
    response: httpx.Response, cancel: threading.Event, done: threading.Event
) -> None:
    """Wait for `cancel` (until `done`), then shut the socket down: closing
    alone does not wake a thread blocked reading it; a shutdown does, and the
    server sees the connection end and frees its slot."""
    while not done.is_set():
        if cancel.wait(_CANCEL_POLL_S):
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            else:
                with contextlib.suppress(Exception):
                    response.close()
            return


def _certificate_refused(error: BaseException) -> bool:
    """Whether a failed connection was TLS refusing the server's certificate."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(
            seen
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
