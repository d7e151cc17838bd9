"""The GPU rows: the same measures with every layer on the GPU that the
installed llama.cpp build offloads to (CUDA, ROCm, Vulkan, Metal), against
the raw llama-cpp-python loop at the same offload; and the memory estimate
made for the GPU against what llama.cpp allocated on it.

On Mesa's software Vulkan driver (llvmpipe, as in CI) the rows say so: there
the GPU is the CPU again, and the rows prove that the path works (device
buffers, offloaded layers, the app on top), not a speed. Without a GPU the
rows are left out, with a note on stderr."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import llama_cpp

from chat.bench.decode import raw_decode_rate
from chat.bench.rows import Options, Row
from chat.bench.startup import installed_python_env
from chat.bench.terminal import stream_in_terminal
from chat.bench.workload import quiet_load
from chat.engine.llama import LlamaEngine
from chat.models.devices import compute_devices, device_label
from chat.models.memory import MIB, buffers_from_log, estimate_memory
from chat.models.metadata import read_metadata
from chat.settings.schema import ModelSettings

SHORT_PROMPT = "Summarise in one line: the keeper logged the tide, the wind and a ship."
"""The app's timed prompt on a GPU: short, since a software GPU reads a few
tokens a second."""
N_CTX = 4096


def gpu_rows(options: Options) -> list[Row]:
    report = compute_devices()
    if report is None or not report.offload_devices:
        why = (report.missing_gpu if report is not None else None) or "no GPU in this build"
        print(f"GPU rows left out: {why}", file=sys.stderr)
        return []
    device = report.offload_devices[0]
    where = device_label(device)
    software = "llvmpipe" in device.description.lower()
    label = f"software Vulkan, {where}" if software else where
    note = "software Vulkan: proves the path, not a speed" if software else ""
    log = Path(tempfile.gettempdir()) / "kvchat-bench-gpu-llama.log"
    log.unlink(missing_ok=True)
    engine = quiet_load(options.model, ModelSettings(n_ctx=N_CTX, n_gpu_layers=-1), log)
    try:
        rows = [_memory_row(engine, log, device.name, label)]
        prompt = engine.tokenize_chat([{"role": "user", "content": SHORT_PROMPT}])
        decode = max(raw_decode_rate(engine, options.tokens) for _ in range(_rounds(options)))
        read = max(_prompt_rate(engine, prompt) for _ in range(_rounds(options)))
    finally:
        engine.close()
    env = installed_python_env(Path(tempfile.mkdtemp(prefix="kvchat-bench-gpu-")))
    env["KVCHAT_MODEL_N_GPU_LAYERS"] = "-1"
    env["KVCHAT_MODEL_N_CTX"] = str(N_CTX)
    run = stream_in_terminal(
        options.model, env, options.tokens, timeout=900, first_prompt=SHORT_PROMPT
    )
    share = run.decode_tps / decode
    rows += [
        Row(f"GPU decode: raw llama-cpp-python, all layers ({label})", decode, "tok/s", note=note),
        Row(f"GPU prompt: raw llama-cpp-python, all layers ({label})", read, "tok/s", note=note),
        Row(
            f"GPU decode: the app in a pseudo-terminal, all layers ({label})",
            run.decode_tps,
            "tok/s",
            ">= 90% of raw, same offload",
            share >= 0.9,
            f"{share:.1%} of raw" + (f"; {note}" if note else ""),
        ),
        Row(
            f"GPU prompt: the app in a pseudo-terminal, all layers ({label})",
            run.prompt_tps,
            "tok/s",
            note=f"{run.prompt_tps / read:.1%} of raw (a short prompt: its first token "
            "counts too)" + (f"; {note}" if note else ""),
        ),
    ]
    return rows


def _rounds(options: Options) -> int:
    return 1 if options.quick else 3


def _prompt_rate(engine: LlamaEngine, prompt: list[int]) -> float:
    llm = engine.llama
    engine.reset()
    started = time.perf_counter()
    llm.eval(prompt)
    # A GPU backend computes after llama_decode has returned: wait for it.
    llama_cpp.llama_synchronize(llm.ctx)
    return len(prompt) / (time.perf_counter() - started)


def _memory_row(engine: LlamaEngine, log: Path, device: str, label: str) -> Row:
    """The estimate made for the GPU against the model, KV and compute buffers
    llama.cpp allocated on it (its log)."""
    name = f"GPU memory estimate vs llama.cpp's allocation on the device ({label})"
    buffers = buffers_from_log(log.read_text(encoding="utf-8", errors="replace"))
    on_device = buffers.get(device, {})
    if not on_device:
        return Row(name, None, "%", note=f"no {device} buffers in {log}")
    real = sum(on_device.values())
    estimate = estimate_memory(
        read_metadata(engine.info.path), engine.info.n_ctx, "f16", "f16", on_gpu=True
    )
    error = 100 * (estimate.total - real) / real
    return Row(
        name,
        error,
        "%",
        "within ±10 %",
        abs(error) <= 10,
        f"estimate {estimate.total / MIB:,.1f} MiB, allocated {real / MIB:,.1f} MiB at "
        f"{engine.info.n_ctx:,} ctx; in RAM beside it: "
        + ", ".join(
            f"{name} {sum(kinds.values()) / MIB:,.1f} MiB"
            for name, kinds in buffers.items()
            if name != device
        ),
    )
