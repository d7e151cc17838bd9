"""A model server: what kvchat adds on top of llama-server's own figures.

llama-server (built by .ci/llama-server, or named by KVCHAT_LLAMA_SERVER, or on
PATH) serves the benchmark's model on loopback; kvchat's remote engine streams
a reply from it. Decode speed is measured where kvchat receives the tokens and
compared with the rate the server reports for the same reply; the second turn
shows how much of the prompt the server's KV cache reused. Without a server
binary the rows are left out (said on stderr), not failed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY
from chat.engine.base import Engine, Finished, TokenEvent

SERVER_ENV = "KVCHAT_LLAMA_SERVER"


def server_binary() -> Path | None:
    configured = os.environ.get(SERVER_ENV)
    if configured:
        return Path(configured)
    import llama_cpp

    tools = Path(os.environ.get("KVCHAT_TOOLS", Path.home() / ".cache" / "kvchat-tools"))
    cached = tools / f"llama.cpp-{llama_cpp.__version__}" / "bin" / "llama-server"
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
            ">= 95% of the server's",
            seen >= 0.95 * server if server else None,
            note=f"the server reports {server:.1f} tok/s for the same reply",
        )
    ]
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
