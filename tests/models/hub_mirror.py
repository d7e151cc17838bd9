"""A Hugging Face Hub on loopback, speaking as much of its HTTP API as
huggingface_hub uses to download a file (huggingface_hub 2.x, file_download.py
and hf_api.py):

- `GET /api/models/{repo}/revision/{rev}?blobs=true`: the commit and the files
  with their sizes and LFS SHA-256 (`model_info(files_metadata=True)`);
- `GET /api/models/{repo}/tree/{rev}`: the same as a tree listing;
- `HEAD /{repo}/resolve/{rev}/{file}`: `X-Repo-Commit`, `ETag` and
  `X-Linked-Etag` (the SHA-256 of an LFS file, its blob name in the cache),
  `X-Linked-Size`, `Content-Length`;
- `GET` of the same, with `Range: bytes=N-` answered 206 (resuming).

Faults on demand: drop the connection after N bytes (once), serve other bytes
than the SHA-256 says, send slowly, or a file that is not there. Hostile
answers on demand: a commit that is a path (`commit`), an ETag that is a path
or names another blob (`etags`), and file names that climb out (`..` in a key
of `files`) are served as given.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote, urlparse

from tests.engine.remote.fake_servers import QuietServer

SEND_CHUNK = 64 * 1024
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Hub:
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """repo -> file path -> content."""
    drop_after: dict[str, int] = field(default_factory=dict)
    """file path -> bytes sent before the connection drops, the first time only."""
    corrupt: set[str] = field(default_factory=set)
    """Files served with other bytes than their SHA-256 says (same length)."""
    delay_s: float = 0.0
    """Pause between pieces of `SEND_CHUNK` bytes of a GET: a slow network."""
    commit: str = COMMIT
    """What the API and `X-Repo-Commit` say a revision points at."""
    etags: dict[str, str] = field(default_factory=dict)
    """file path -> the ETag (and X-Linked-Etag) answered instead of its SHA-256."""
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, path, Range header) of every request."""
    release: threading.Event = field(default_factory=threading.Event)
    """Set at the end of a test: slow senders stop."""
    url: str = ""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _serve(self, head: bool) -> None:
            path = unquote(urlparse(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)", path)
            if api:
                self._api(api[1], api[2])
                return
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if resolve and resolve[1] in hub.files and resolve[3] in hub.files[resolve[1]]:
                self._file(hub.files[resolve[1]][resolve[3]], resolve[3], head)
                return
            plain = re.fullmatch(r"/plain/(.+)", path)
            if plain and plain[1] in hub.files.get("plain", {}):
                self._file(hub.files["plain"][plain[1]], plain[1], head)
                return
            code = "RepoNotFound" if not resolve or resolve[1] not in hub.files else "EntryNotFound"
            self._reply(404, b"{}", {"X-Error-Code": code, "X-Repo-Commit": hub.commit})

        def _api(self, repo: str, kind: str) -> None:
            if repo not in hub.files:
                self._reply(
                    404, b'{"error":"Repository not found"}', {"X-Error-Code": "RepoNotFound"}
                )
                return
            entries = [
                (name, len(data), _sha(data)) for name, data in sorted(hub.files[repo].items())
            ]
            if kind == "revision":
                siblings = [
                    {
                        "rfilename": name,
                        "size": size,
                        "blobId": sha[:40],
                        "lfs": {"size": size, "sha256": sha, "pointerSize": 134},
                    }
                    for name, size, sha in entries
                ]
                body = {"id": repo, "modelId": repo, "sha": hub.commit, "siblings": siblings}
            else:
                body = [  # type: ignore[assignment]
                    {
                        "type": "file",
                        "path": name,
                        "size": size,
                        "oid": sha[:40],
                        "lfs": {"oid": sha, "size": size, "pointerSize": 134},
                    }
                    for name, size, sha in entries
                ]
            self._reply(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def _file(self, data: bytes, name: str, head: bool) -> None:
            sha = hub.etags.get(name, _sha(data))
            headers = {
                "X-Repo-Commit": hub.commit,
                "ETag": f'"{sha}"',
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "Accept-Ranges": "bytes",
            }
            if head:
                self._reply(200, b"", {**headers, "Content-Length": str(len(data))}, body=False)
                return
            served = bytes(255 - b for b in data) if name in hub.corrupt else data
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if match:
                start = int(match[1])
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            self.send_response(206 if match else 200)
            for key, value in {**headers, "Content-Length": str(len(data) - start)}.items():
                self.send_header(key, value)
            self.end_headers()
            limit = hub.drop_after.pop(name, None)
            body = served[start:]
            if limit is not None:
                self.wfile.write(body[:limit])
                self.wfile.flush()
                self.close_connection = True
                return
            for offset in range(0, len(body), SEND_CHUNK):
                if hub.delay_s and hub.release.wait(hub.delay_s):
                    self.close_connection = True
                    return
                self.wfile.write(body[offset : offset + SEND_CHUNK])

        def _reply(
            self, status: int, data: bytes, headers: dict[str, str], body: bool = True
        ) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


@contextmanager
def running_hub(hub: Hub) -> Iterator[Hub]:
    server = QuietServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def wait_for(condition: object, timeout: float = 10.0) -> None:
    """Wait until `condition()` is true (a condition, never a fixed pause)."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
