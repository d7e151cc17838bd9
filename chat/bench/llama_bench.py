"""llama.cpp's own `llama-bench`, built from the llama.cpp sources that the
llama-cpp-python sdist vendors (by .ci/llama-server, next to llama-server):
prompt processing (pp512) and decode (tg128) at each thread count, the
native rates kvchat's are shown beside."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from chat.bench.remote import server_binary

BENCH_ENV = "KVCHAT_LLAMA_BENCH"


@dataclass(frozen=True)
class NativeRates:
    prompt_tps: dict[int, float]
    """Prompt tokens per second (pp512) by thread count."""
    decode_tps: dict[int, float]
    """Generated tokens per second (tg128) by thread count."""


def bench_binary() -> Path | None:
    configured = os.environ.get(BENCH_ENV)
    if configured:
        return Path(configured)
    server = server_binary()
    if server is not None and (server.parent / "llama-bench").is_file():
        return server.parent / "llama-bench"
    found = shutil.which("llama-bench")
    return Path(found) if found else None


def native_rates(
    binary: Path,
    model: Path,
    threads: list[int],
    prompt: int = 512,
    generate: int = 128,
    repetitions: int = 3,
    env: dict[str, str] | None = None,
) -> NativeRates:
    """Run llama-bench once over every thread count (it alternates nothing:
    each test's repetitions run back to back) and read its JSON."""
    command = [
        str(binary),
        "-m", str(model),
        "-p", str(prompt),
        "-n", str(generate),
        "-t", ",".join(str(n) for n in threads),
        "-r", str(repetitions),
        "-o", "json",
        # The key type kvchat uses on a CPU (chat.engine.llama.key_cache_type).
        "-ctk", "q8_0",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True, env=env)
    prompt_tps: dict[int, float] = {}
    decode_tps: dict[int, float] = {}
    for test in json.loads(done.stdout):
        rates = decode_tps if test["n_gen"] > 0 else prompt_tps
        rates[int(test["n_threads"])] = float(test["avg_ts"])
    return NativeRates(prompt_tps, decode_tps)
