"""A model server: what kvchat adds on top of llama-server's own figures.

llama-server (built by .ci/llama-server, or named by KVCHAT_LLAMA_SERVER, or on
PATH) serves the benchmark's model on loopback; kvchat's remote engine streams
a reply from it. Decode speed is measured where kvchat receives the tokens and
compared with the rate the server reports for the same reply; the second turn
shows how much of the prompt the server's KV cache reused. Without a server
binary the rows are left out (said on stderr), not failed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY, first_token_reply
from chat.engine.base import Engine, Finished, TokenEvent

SERVER_ENV = "KVCHAT_LLAMA_SERVER"


def server_binary() -> Path | None:
    configured = os.environ.get(SERVER_ENV)
    if configured:
        return Path(configured)
    import llama_cpp

    tools = Path(os.environ.get("KVCHAT_TOOLS", Path.home() / ".cache" / "kvchat-tools"))
    # The folder .ci/llama-server builds into ("-rpc": built with the RPC backend).
    cached = tools / f"llama.cpp-{llama_cpp.__version__}-rpc" / "bin" / "llama-server"
    if cached.is_file():
        return cached
    found = shutil.which("llama-server")
    return Path(found) if found else None


def remote_rows(options: Options) -> list[Row]:
    binary = server_binary()
    if binary is None:
        print(
            f"remote rows left out: no llama-server (run .ci/llama-server or set {SERVER_ENV})",
            file=sys.stderr,
        )
        return []
    with (
        tempfile.TemporaryDirectory() as folder,
        _serving(binary, options.model, Path(folder)) as url,
    ):
        from chat.engine.remote import ServerConfig, connect

        engine = connect(ServerConfig(url))
        try:
            return _measure(engine, options)
        finally:
            engine.close()


def _measure(engine: Engine, options: Options) -> list[Row]:
    sampling = replace(SAMPLING, max_tokens=options.tokens)
    story = [{"role": "user", "content": STORY}]
    times: list[float] = []
    finished: Finished | None = None
    for event in engine.stream_reply(story, sampling, threading.Event()):
        if isinstance(event, TokenEvent):
            times.append(time.perf_counter())
        elif isinstance(event, Finished):
            finished = event
    if finished is None or len(times) < 2:
        return [Row("remote: decode through kvchat (llama-server)", None, "tok/s")]
    seen = (len(times) - 1) / (times[-1] - times[0])
    server = finished.stats.decode_tps
    follow_up = [
        *story,
        {"role": "assistant", "content": finished.text},
        {"role": "user", "content": "Now make it shorter."},
    ]
    second: Finished | None = None
    for event in engine.stream_reply(follow_up, replace(sampling, max_tokens=8), threading.Event()):
        if isinstance(event, Finished):
            second = event
    rows = [
        Row(
            "remote: decode through kvchat (llama-server)",
            seen,
            "tok/s",
            ">= 97% of the server's",
            seen >= 0.97 * server if server else None,
            note=f"the server reports {server:.1f} tok/s for the same reply",
        )
    ]
    rows += _overhead_rows(engine, story)
    if second is not None:
        stats = second.stats
        rows.append(
            Row(
                "remote: turn 2 evaluated by the server",
                stats.prompt_evaluated,
                "tokens",
                note=(
                    f"of {stats.prompt_tokens:,} sent; {stats.prompt_reused:,} reused from its "
                    f"cache; first token {stats.ttft_s * 1000:.0f} ms"
                ),
            )
        )
    return rows


def _overhead_rows(engine: Engine, story: list[dict[str, str]]) -> list[Row]:
    """What kvchat adds to the server's own first-token time, against a bare
    HTTP client sending the same prompt (both find it in the server's cache:
    the difference is kvchat's work, not the server's); and what the context
    meter's count of a new draft costs (llama-server renders and tokenizes it:
    two requests, made off the UI thread)."""
    url = engine.info.server_url
    assert url is not None
    rendered = _post(url, "/apply-template", {"messages": story, "add_generation_prompt": True})
    prompt = str(rendered["prompt"])
    kvchat_s: list[float] = []
    bare_s: list[float] = []
    for _ in range(11):  # in turns, the first of each a warm-up
        kvchat_s.append(first_token_reply(engine, story).stats.ttft_s)
        bare_s.append(_bare_first_token_s(url, prompt))
    added_ms = (statistics.median(kvchat_s[1:]) - statistics.median(bare_s[1:])) * 1000
    counts_ms = []
    for draft in range(10):
        draft_message = {"role": "user", "content": f"A new draft, number {draft}."}
        started = time.perf_counter()
        engine.tokenize_chat([*story, draft_message])
        counts_ms.append((time.perf_counter() - started) * 1000)
    return [
        Row(
            "remote: first token, kvchat minus a bare HTTP client",
            added_ms,
            "ms",
            "<= 5 ms",
            added_ms <= 5,
            note=f"medians of 10: kvchat {statistics.median(kvchat_s[1:]) * 1000:.1f} ms, "
            f"bare client {statistics.median(bare_s[1:]) * 1000:.1f} ms (urllib, a connection "
            "per request; kvchat keeps one open), prompt cached",
        ),
        Row(
            "remote: the meter's count of a new draft",
            statistics.median(counts_ms),
            "ms",
            note="median; two requests to llama-server, made in a thread: typing never waits",
        ),
    ]


def _post(url: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return dict(json.loads(answer.read()))


def _bare_first_token_s(url: str, prompt: str) -> float:
    """A minimal streaming client: the prompt as text, one token asked for."""
    body = {"prompt": prompt, "n_predict": 1, "stream": True, "cache_prompt": True}
    request = urllib.request.Request(
        url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        for line in answer:
            if line.startswith(b"data:"):
                waited = time.perf_counter() - started
                break
        else:
            raise RuntimeError("llama-server streamed nothing")
        answer.read()  # the rest of the stream, so the slot is free for the next request
    return waited


class _serving:
    """llama-server with `model` on a free loopback port, ready; stopped after."""

    def __init__(self, binary: Path, model: Path, folder: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.command = [
            str(binary),
            *("-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)),
            *("-c", "4096", "--parallel", "1", "--threads", str(os.cpu_count() or 1)),
        ]
        self.log = folder / "llama-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return url
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"llama-server did not start; its log: {self.log}")

    def __exit__(self, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
