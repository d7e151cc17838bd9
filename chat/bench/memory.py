"""The memory estimate (chat.models.memory, what the model picker shows before
loading) against what llama.cpp allocated when it loaded the benchmark's
model: the KV cache and compute buffers from its own log, plus the file."""

from __future__ import annotations

from pathlib import Path

from chat.bench.rows import Row
from chat.engine.protocol import Engine
from chat.models.memory import MIB, allocated_from_log, estimate_memory
from chat.models.metadata import read_metadata

# llama.cpp's ggml type numbers for the cache types kvchat uses.
CACHE_TYPE_NAMES = {1: "f16", 8: "q8_0"}


def memory_rows(engine: Engine, log: Path) -> list[Row]:
    name = "memory estimate vs llama.cpp's allocation"
    try:
        allocated = allocated_from_log(log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        allocated = None
    if allocated is None:
        return [Row(name, None, "%", note=f"no allocation lines in {log}")]
    kv, compute = allocated
    identity = engine.state_identity()
    meta = read_metadata(engine.info.path)
    estimate = estimate_memory(
        meta,
        engine.info.n_ctx,
        CACHE_TYPE_NAMES.get(identity.type_k, "f16"),
        CACHE_TYPE_NAMES.get(identity.type_v, "f16"),
        identity.flash_attn,
    )
    real = meta.file_size + kv + compute
    error = 100 * (estimate.total - real) / real
    return [
        Row(
            name,
            error,
            "%",
            "within ±10 %",
            abs(error) <= 10,
            note=(
                f"estimate {estimate.total / MIB:,.1f} MiB, allocated {real / MIB:,.1f} MiB "
                f"(KV {estimate.kv_cache / MIB:,.1f}/{kv / MIB:,.1f}, compute "
                f"{estimate.compute / MIB:,.1f}/{compute / MIB:,.1f}) at {engine.info.n_ctx:,} ctx"
            ),
        )
    ]
