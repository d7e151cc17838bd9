"""One model over several machines: llama-server with every layer on two of
llama.cpp's rpc-servers (`--rpc A,B -ngl 99`) beside the same llama-server
holding the model itself, in the same run, through kvchat's remote engine.

Here the "machines" are processes on loopback: the rows show what the RPC
path costs on one machine (each token's layers run in two processes, one
after the other, its activations passed through llama-server over sockets),
not what a second machine adds. Both servers get the same threads
(`THREADS`); they answer in turns, never at once. The rpc-server binary is
the one `.ci/llama-server` builds beside llama-server; without it the rows
are left out (said on stderr), not failed."""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from chat.bench.remote import LlamaServer, server_binary
from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY, finished, first_token_reply
from chat.engine.protocol import Engine

RPC_SERVERS = 2
THREADS = 1
"""Every process computes with one thread: the same work for one core either
way, and a figure that holds on a busy machine (with more threads than free
cores, llama.cpp's threads wait on each other)."""


def rpc_rows(options: Options) -> list[Row]:
    binary = server_binary()
    rpc_binary = binary.parent / "rpc-server" if binary is not None else None
    if binary is None or rpc_binary is None or not rpc_binary.is_file():
        print(
            "RPC rows left out: no rpc-server beside llama-server (run .ci/llama-server)",
            file=sys.stderr,
        )
        return []
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workers = stack.enter_context(_rpc_servers(rpc_binary, RPC_SERVERS, THREADS, folder))
        (folder / "alone").mkdir()
        (folder / "rpc").mkdir()
        alone = LlamaServer(binary, options.model, folder / "alone", threads=THREADS)
        spread = LlamaServer(
            binary,
            options.model,
            folder / "rpc",
            threads=THREADS,
            extra=("--rpc", ",".join(workers), "-ngl", "99"),
        )
        alone_url = stack.enter_context(alone)
        spread_url = stack.enter_context(spread)

        from chat.engine.remote import ServerConfig, connect

        engines = {
            name: stack.enter_context(contextlib.closing(connect(ServerConfig(url))))
            for name, url in (("alone", alone_url), ("rpc", spread_url))
        }
        return _measure(engines["alone"], engines["rpc"], options)


@dataclass
class _Figures:
    decode_tps: list[float]
    ttft_s: list[float]


def _measure(alone: Engine, over_rpc: Engine, options: Options) -> list[Row]:
    figures = {"alone": _Figures([], []), "rpc": _Figures([], [])}
    engines = {"alone": alone, "rpc": over_rpc}
    sampling = replace(SAMPLING, max_tokens=options.tokens)
    story = [{"role": "user", "content": STORY}]
    rounds = 1 if options.quick else 3
    # Round 0 warms up (left out in quick mode, which checks only that the rows
    # are measured); in turns, so drift on the machine touches both alike.
    first_round = 1 if options.quick else 0
    prompt_tokens = 0
    for round_ in range(first_round, rounds + 1):
        for name, engine in engines.items():
            # A prompt new to the server's cache (it differs from the first
            # word on), so the first token waits for the whole prompt.
            fresh = [{"role": "user", "content": f"Story {round_}. {STORY}"}]
            first = first_token_reply(engine, fresh)
            decoded = finished(engine.stream_reply(story, sampling, threading.Event()))
            if round_ > 0:
                figures[name].ttft_s.append(first.stats.ttft_s)
                figures[name].decode_tps.append(decoded.stats.decode_tps)
                prompt_tokens = first.stats.prompt_tokens
    decode = {name: statistics.median(f.decode_tps) for name, f in figures.items()}
    ttft_ms = {name: statistics.median(f.ttft_s) * 1000 for name, f in figures.items()}
    where = f"every layer on {RPC_SERVERS} rpc-servers on loopback"
    return [
        Row(
            f"rpc: decode, llama-server over {RPC_SERVERS} rpc-servers",
            decode["rpc"],
            "tok/s",
            note=f"llama-server alone {decode['alone']:.1f} tok/s "
            f"({decode['rpc'] / decode['alone']:.0%} of it); {options.tokens} tokens, "
            f"the server's figure, median of {rounds}; {where}",
        ),
        Row(
            f"rpc: first token, llama-server over {RPC_SERVERS} rpc-servers",
            ttft_ms["rpc"],
            "ms",
            note=f"llama-server alone {ttft_ms['alone']:.0f} ms; a new prompt of "
            f"{prompt_tokens} tokens, median of {rounds}",
        ),
    ]


@contextlib.contextmanager
def _rpc_servers(binary: Path, count: int, threads: int, folder: Path) -> Iterator[list[str]]:
    """`count` rpc-servers on free loopback ports, listening; their host:port."""
    started: list[subprocess.Popen[bytes]] = []
    addresses: list[str] = []
    try:
        for number in range(count):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            command = [str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", str(threads)]
            with (folder / f"rpc-server-{number}.log").open("wb") as out:
                started.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
            _wait_for_port(port, started[-1])
            addresses.append(f"127.0.0.1:{port}")
        yield addresses
    finally:
        for process in started:  # they hold nothing to save: killed, the fastest way out
            process.kill()
            process.wait(10)


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"rpc-server did not listen on port {port}")
