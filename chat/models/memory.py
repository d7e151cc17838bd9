"""What a model costs in memory at a given context size, and the largest
context that fits.

Three parts, as llama.cpp allocates them when it loads a model:
- the weights: the file's size (llama.cpp maps the tensors; the tokenizer's
  few MB in the header are counted too, on the safe side);
- the KV cache: per token and layer, a key and a value vector per KV head, in
  the cache types chosen (q8_0 stores 32 values in 34 bytes);
- the compute buffer: scratch for one batch (`n_ubatch` tokens). Its largest
  tensors are the logits of the batch (vocabulary × batch floats) and, without
  flash attention, one layer's attention scores (heads × batch × context
  floats); the buffer is about the larger of the two, since llama.cpp reuses
  memory between them, plus the batch's hidden states. The 15 % on the scores
  covers the softmax and masking that sit beside them: measured on the demo
  model, see tests/models/test_memory.py.

With every layer on a GPU the estimate is what the GPU holds: llama.cpp keeps
the input layer (the token embedding table) in RAM however many layers it
offloads, since its input is a lookup, not a product; the output layer goes
to the GPU first, and when it is tied to the embedding (no `output.weight`)
the GPU holds a copy of the table. The KV cache and the compute buffer are on
the GPU; beside them llama.cpp keeps a compute buffer in RAM for what runs on
the CPU (the input lookup, and any operation the GPU's backend refuses, such
as a tensor larger than the device allows in one buffer). docs/gpu.md
compares the estimate with a real allocation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from chat.errors import ModelError
from chat.models.devices import DeviceReport
from chat.models.metadata import ModelMetadata
from chat.settings.schema import key_cache_type_for

MIB = 1024 * 1024

CACHE_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
"""Bytes per stored value of each KV cache type (ggml's block sizes)."""
CONTEXT_PADDING = 256
"""llama.cpp rounds the context size up to a multiple of this."""
DEFAULT_UBATCH = 512
"""llama.cpp's default physical batch (`n_ubatch`), which sizes the compute buffer."""
_SCORES_OVERHEAD = 1.15
_MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a model needs at one context size."""

    n_ctx: int
    """The context size llama.cpp will use (rounded up to a multiple of 256)."""
    weights: int
    """The weights where the estimate is counted: the whole file in RAM; on a
    GPU, all but the input embedding (plus its copy as a tied output layer)."""
    kv_cache: int
    compute: int
    host: int = 0
    """With every layer on a GPU: the weights kept in RAM beside it (the token
    embedding table), not part of `total`; 0 otherwise."""

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute

    def fits(self, available: int) -> bool:
        return self.total <= available


def padded_context(n_ctx: int) -> int:
    return -(-n_ctx // CONTEXT_PADDING) * CONTEXT_PADDING


def cache_type_bytes(cache_type: str) -> float:
    try:
        return CACHE_TYPE_BYTES[cache_type.lower()]
    except KeyError:
        known = ", ".join(CACHE_TYPE_BYTES)
        raise ModelError(f"Unknown KV cache type {cache_type!r}: use one of {known}.") from None


def kv_cache_bytes(meta: ModelMetadata, n_ctx: int, type_k: str, type_v: str) -> int:
    """The KV cache of `n_ctx` tokens (already padded), as llama.cpp sizes it.

    Layers with a sliding window keep only the window plus one batch of tokens
    (llama.cpp's separate SWA cache, `swa_full` off)."""
    k_bytes, v_bytes = cache_type_bytes(type_k), cache_type_bytes(type_v)
    if not meta.head_count_kv or not meta.key_length:
        raise ModelError(
            f"Cannot estimate the memory of {meta.path.name}: its file gives no attention "
            f"sizes (architecture {meta.architecture})."
        )
    swa_cells = n_ctx
    if meta.sliding_window:
        swa_cells = min(n_ctx, padded_context(meta.sliding_window + DEFAULT_UBATCH))
    # Which layers have the window is known only as a count: give the window
    # to the layers with the fewest KV heads, so the estimate errs high.
    per_layer = sorted(meta.head_count_kv)
    total = 0.0
    for index, heads in enumerate(per_layer):
        cells = swa_cells if index < meta.swa_layers else n_ctx
        total += cells * heads * (meta.key_length * k_bytes + meta.value_length * v_bytes)
    return int(total)


def compute_bytes(
    meta: ModelMetadata, n_ctx: int, flash_attn: bool = False, n_ubatch: int = DEFAULT_UBATCH
) -> int:
    """The compute buffer for one batch of `n_ubatch` tokens (an approximation;
    see the module's docstring)."""
    logits = meta.vocab_size * n_ubatch * 4
    # Flash attention never holds a layer's whole score matrix: its scratch is
    # about the size of the feed-forward activations.
    scores = 0 if flash_attn else int(_SCORES_OVERHEAD * meta.head_count * n_ubatch * n_ctx * 4)
    feed_forward = 2 * meta.feed_forward_length * n_ubatch * 4
    hidden = 2 * meta.embedding_length * n_ubatch * 4
    return max(logits, scores, feed_forward) + hidden


def estimate_memory(
    meta: ModelMetadata,
    n_ctx: int,
    type_k: str = "q8_0",
    type_v: str = "f16",
    flash_attn: bool = False,
    n_ubatch: int = DEFAULT_UBATCH,
    on_gpu: bool = False,
) -> MemoryEstimate:
    """Memory for `meta` loaded with a context of `n_ctx` tokens (0: the
    model's trained context, as llama.cpp does). kvchat's defaults on the CPU:
    q8_0 keys, f16 values. `on_gpu`: every layer offloaded, the estimate is
    what the GPU holds (see the module's docstring)."""
    if n_ctx <= 0:
        n_ctx = meta.context_length or 4096
    n_ctx = padded_context(n_ctx)
    weights, host = meta.file_size, 0
    if on_gpu:
        host = meta.input_embedding_bytes
        if not meta.tied_output:
            weights -= host
    return MemoryEstimate(
        n_ctx=n_ctx,
        weights=weights,
        kv_cache=kv_cache_bytes(meta, n_ctx, type_k, type_v),
        compute=compute_bytes(meta, n_ctx, flash_attn, n_ubatch),
        host=host,
    )


def largest_fitting_context(
    meta: ModelMetadata,
    available: int,
    type_k: str = "q8_0",
    type_v: str = "f16",
    flash_attn: bool = False,
    n_ubatch: int = DEFAULT_UBATCH,
    on_gpu: bool = False,
) -> int:
    """The largest context (a multiple of 256, at most the trained context)
    whose estimate fits in `available` bytes; 0 if not even 256 tokens fit."""
    ceiling = padded_context(meta.context_length or 4096) // CONTEXT_PADDING

    def fits(steps: int) -> bool:
        n_ctx = steps * CONTEXT_PADDING
        estimate = estimate_memory(meta, n_ctx, type_k, type_v, flash_attn, n_ubatch, on_gpu)
        return estimate.fits(available)

    # Memory grows with the context: a binary search over multiples of 256.
    low, high = 0, ceiling
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low * CONTEXT_PADDING


def available_ram(meminfo: Path = _MEMINFO) -> int | None:
    """Memory the system can give without swapping: Linux's `MemAvailable`
    (free memory plus caches it can drop, mapped model files included). On
    other systems psutil's figure when psutil is installed, else None."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the kernel writes kB, meaning KiB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


@dataclass(frozen=True)
class MemoryBudget:
    """What a model's estimate is compared with: the free bytes of one kind
    of memory, and why that one."""

    available: int | None
    """Bytes free; None when they cannot be told."""
    memory: str
    """"RAM" or "GPU memory"."""
    devices: tuple[str, ...] = ()
    """The GPU devices that take offloaded layers ("CUDA0", "Vulkan0"): every
    layer with `memory` "GPU memory", some of them with a partial offload."""
    gpu_layers: int = 0
    """Layers offloaded when only some are (the budget is then the RAM, as
    if none were: see `memory_budget`); 0 otherwise."""
    n_layers: int = 0
    cpu_only: bool = False
    """Layers were asked on a GPU but this llama.cpp build runs on the CPU only."""
    missing_gpu: str | None = None
    """With `cpu_only`: why, when the build has a GPU backend that found no
    device ("no Vulkan device found")."""

    @property
    def on_gpu(self) -> bool:
        return self.memory == GPU_MEMORY


RAM = "RAM"
GPU_MEMORY = "GPU memory"


def memory_budget(
    ram: int | None,
    n_gpu_layers: int = 0,
    n_layers: int = 0,
    devices: DeviceReport | None = None,
) -> MemoryBudget:
    """Which memory a model of `n_layers` layers loaded with `n_gpu_layers`
    (-1: all) is measured against, with `ram` bytes of RAM free and the
    devices llama.cpp reports (None: unknown, taken as the CPU alone).

    - Nothing offloaded (0 layers asked, a CPU-only build, no GPU found): RAM.
    - Every layer offloaded (-1, or more than `n_layers`: llama.cpp counts
      the output layer as one more layer, and offloads it first): the free
      memory of the GPUs llama.cpp spreads the layers over, all together,
      against the estimate made `on_gpu`.
    - Some layers offloaded: the RAM, as if every layer stayed on the CPU. How
      the weights split between the devices needs each tensor's size, which
      the header reader does not keep, so the GPU's share is not checked."""
    offload = devices.offload_devices if devices is not None and n_gpu_layers != 0 else ()
    cpu_only = devices is not None and n_gpu_layers != 0 and not devices.gpu_offload
    if not offload:
        missing = devices.missing_gpu if cpu_only and devices is not None else None
        return MemoryBudget(ram, RAM, n_layers=n_layers, cpu_only=cpu_only, missing_gpu=missing)
    names = tuple(device.name for device in offload)
    if n_gpu_layers < 0 or n_gpu_layers > n_layers:
        free = sum(device.free for device in offload)
        return MemoryBudget(free, GPU_MEMORY, names, n_layers=n_layers)
    return MemoryBudget(ram, RAM, names, gpu_layers=n_gpu_layers, n_layers=n_layers)


def key_cache_type(setting: str, n_gpu_layers: int, devices: DeviceReport | None) -> str:
    """The KV cache's key type the engine will use (`key_cache_type_for`),
    with the devices the build reports."""
    on_cpu = devices is None or not devices.gpu_offload or n_gpu_layers == 0
    return key_cache_type_for(setting, on_cpu)


_LOG_KV = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")
_LOG_COMPUTE = re.compile(r"compute buffer size =\s*([\d.]+) MiB")


def allocated_from_log(log: str) -> tuple[int, int] | None:
    """Bytes llama.cpp says it allocated for the KV cache and the compute
    buffers at the last load in `log` (its own log lines, e.g.
    `llama_kv_cache: size = 137.81 MiB (...)` and `CPU compute buffer size =
    165.28 MiB`); None when the log does not say."""
    kv = _LOG_KV.findall(log)
    if not kv:
        return None
    # The compute buffers reported after that KV cache (one per device).
    after = log[log.rfind("llama_kv_cache: size") :]
    compute = sum(float(mib) for mib in _LOG_COMPUTE.findall(after))
    return int(float(kv[-1]) * MIB), int(compute * MIB)


_LOG_BUFFER = re.compile(r"^\S+:\s+(\S+) (model|KV|compute) buffer size =\s*([\d.]+) MiB", re.M)


def buffers_from_log(log: str) -> dict[str, dict[str, int]]:
    """The buffers llama.cpp allocated at the last load in `log`, in bytes by
    buffer type and kind: `{"Vulkan0": {"model": ..., "KV": ..., "compute":
    ...}, "CPU_Mapped": {"model": ...}, "Vulkan_Host": {"compute": ...}}`.
    llama.cpp 0.3.36 prints a line per buffer (`load_tensors:      Vulkan0
    model buffer size =    92.10 MiB`, `llama_kv_cache: ... KV buffer size`,
    `sched_reserve: ... compute buffer size`); model buffers after a KV or
    compute line start another load."""
    buffers: dict[str, dict[str, int]] = {}
    seen_context = False
    for match in _LOG_BUFFER.finditer(log):
        name, kind, mib = match[1], match[2], float(match[3])
        if kind == "model" and seen_context:
            buffers, seen_context = {}, False
        seen_context = seen_context or kind != "model"
        kinds = buffers.setdefault(name, {})
        kinds[kind] = kinds.get(kind, 0) + int(mib * MIB)
    return buffers
