"""The memory estimate against what llama.cpp really allocates."""

from __future__ import annotations

import ctypes
import re
from dataclasses import replace
from pathlib import Path

import pytest

from chat.errors import ModelError
from chat.models.memory import (
    available_ram,
    buffers_from_log,
    estimate_memory,
    largest_fitting_context,
    memory_budget,
)
from chat.models.metadata import read_metadata
from tests.models.gguf_files import llama_fields, write_gguf

MiB = 1024 * 1024
_log_lines: list[str] = []


def _collect(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    _log_lines.append(text.decode("utf-8", errors="replace"))


_callback = None
"""The ctypes callback, kept alive at module level for as long as llama.cpp may call it."""


def _real_allocation(path: Path, n_ctx: int, type_k: str, flash_attn: bool) -> dict[str, float]:
    """MiB llama.cpp reports for the KV cache and the compute buffer."""
    global _callback
    import llama_cpp

    if _callback is None:
        _callback = llama_cpp.llama_log_callback(_collect)
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    _log_lines.clear()
    llm = llama_cpp.Llama(
        str(path),
        n_ctx=n_ctx,
        n_batch=512,
        type_k=getattr(llama_cpp, f"GGML_TYPE_{type_k.upper()}"),
        type_v=llama_cpp.GGML_TYPE_F16,
        flash_attn=flash_attn,
        verbose=True,
    )
    llm.close()
    log = "".join(_log_lines)
    # llama.cpp 0.3.36 (llama-kv-cache.cpp, llama-context.cpp) prints:
    #   llama_kv_cache: size =  137.81 MiB (  8192 cells,  30 layers,  1/1 seqs), K (q8_0): ...
    #   sched_reserve:        CPU compute buffer size =   165.28 MiB
    kv = re.search(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells", log)
    compute = re.findall(r"compute buffer size =\s*([\d.]+) MiB", log)
    assert kv and compute, log[-2000:]
    return {"kv": float(kv[1]), "cells": int(kv[2]), "compute": sum(map(float, compute))}


@pytest.mark.model
@pytest.mark.parametrize(
    ("n_ctx", "type_k", "flash_attn"),
    [
        (512, "q8_0", False),
        (1000, "f16", False),
        (4096, "q8_0", False),
        (8192, "q8_0", False),
        (8192, "f16", True),
    ],
)
def test_estimate_is_within_ten_percent_of_llama_cpp(
    demo_model: Path, n_ctx: int, type_k: str, flash_attn: bool
) -> None:
    meta = read_metadata(demo_model)
    estimate = estimate_memory(meta, n_ctx, type_k, "f16", flash_attn=flash_attn)
    real = _real_allocation(demo_model, n_ctx, type_k, flash_attn)

    assert estimate.n_ctx == real["cells"]  # padded the same way
    assert estimate.kv_cache / MiB == pytest.approx(real["kv"], abs=0.01)
    assert estimate.compute / MiB == pytest.approx(real["compute"], rel=0.10)
    # The weights: llama.cpp maps the tensors; the file adds its header (the tokenizer).
    real_total = meta.file_size / MiB + real["kv"] + real["compute"]
    assert estimate.total / MiB == pytest.approx(real_total, rel=0.10)


def _tiny(tmp_path: Path, **overrides: object) -> Path:
    return write_gguf(tmp_path / "tiny.gguf", llama_fields(**overrides), padding=10 * MiB)


def test_kv_cache_follows_the_formula(tmp_path: Path) -> None:
    meta = read_metadata(_tiny(tmp_path))
    estimate = estimate_memory(meta, 4096, "q8_0", "f16")
    # 4 layers, 2 KV heads of 32 values, keys at 34/32 bytes, values at 2.
    assert estimate.kv_cache == 4096 * 4 * 2 * (32 * 34 / 32 + 32 * 2)
    assert estimate.weights == meta.file_size
    assert estimate_memory(meta, 0).n_ctx == 4096  # 0: the trained context
    assert estimate_memory(meta, 1000).n_ctx == 1024  # padded to 256


def test_sliding_window_layers_keep_only_the_window(tmp_path: Path) -> None:
    full = read_metadata(_tiny(tmp_path))
    windowed = replace(full, sliding_window=1024, swa_layers=3)
    at_32k = 32768
    kv_full = estimate_memory(full, at_32k).kv_cache
    kv_windowed = estimate_memory(windowed, at_32k).kv_cache
    per_cell_layer = kv_full / (at_32k * 4)
    assert kv_windowed == pytest.approx(per_cell_layer * (at_32k + 3 * 1536))


def test_unknown_cache_type_is_a_model_error(tmp_path: Path) -> None:
    meta = read_metadata(_tiny(tmp_path))
    with pytest.raises(ModelError, match="Unknown KV cache type 'q3'"):
        estimate_memory(meta, 512, "q3")


def test_largest_fitting_context_is_the_boundary(tmp_path: Path) -> None:
    meta = read_metadata(_tiny(tmp_path, **{"llama.context_length": 131072}))
    budget = estimate_memory(meta, 20000).total
    best = largest_fitting_context(meta, budget)
    assert best % 256 == 0
    assert estimate_memory(meta, best).fits(budget)
    assert not estimate_memory(meta, best + 256).fits(budget)
    assert largest_fitting_context(meta, 10**15) == 131072  # never past the trained context
    assert largest_fitting_context(meta, 1000) == 0  # not even the weights


def test_available_ram_reads_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    2048 kB\n")
    assert available_ram(meminfo) == 2048 * 1024
    assert memory_budget(5 * MiB).available == 5 * MiB  # no layer offloaded: the RAM
    real = available_ram()
    assert real is None or real > 0


def test_the_allocation_is_read_from_the_last_load_in_the_log() -> None:
    from chat.models.memory import allocated_from_log

    log = (
        "llama_kv_cache: size =   10.00 MiB (  512 cells, ...)\n"
        "sched_reserve:        CPU compute buffer size =   20.00 MiB\n"
        "llama_kv_cache: size =  137.81 MiB (  8192 cells,  30 layers,  1/1 seqs)\n"
        "sched_reserve:        CPU compute buffer size =   165.28 MiB\n"
    )
    kv, compute = allocated_from_log(log) or (0, 0)
    assert kv / MiB == pytest.approx(137.81, abs=0.01)
    assert compute / MiB == pytest.approx(165.28, abs=0.01)
    assert allocated_from_log("no model was loaded") is None


def test_on_a_gpu_the_input_embedding_stays_in_ram(tmp_path: Path) -> None:
    """llama.cpp keeps the token embedding table on the CPU whatever it
    offloads; a tied output layer is a copy of it on the GPU."""
    embedding = {"token_embd.weight": (64, 1000)}
    tied = read_metadata(
        write_gguf(tmp_path / "tied.gguf", llama_fields(), tensors=embedding, padding=0)
    )
    untied = read_metadata(
        write_gguf(
            tmp_path / "untied.gguf",
            llama_fields(),
            tensors={**embedding, "output.weight": (64, 1000)},
            padding=0,
        )
    )
    table = 64 * 1000 * 4  # F32
    assert (tied.input_embedding_bytes, tied.tied_output) == (table, True)
    assert (untied.input_embedding_bytes, untied.tied_output) == (table, False)
    on_cpu = estimate_memory(untied, 1024)
    on_gpu = estimate_memory(untied, 1024, on_gpu=True)
    assert (on_cpu.weights, on_cpu.host) == (untied.file_size, 0)
    assert (on_gpu.weights, on_gpu.host) == (untied.file_size - table, table)
    assert on_gpu.total == on_cpu.total - table
    tied_on_gpu = estimate_memory(tied, 1024, on_gpu=True)
    assert (tied_on_gpu.weights, tied_on_gpu.host) == (tied.file_size, table)


def test_buffers_are_read_from_the_last_load_in_the_log() -> None:
    load = (
        "load_tensors:   CPU_Mapped model buffer size =    28.69 MiB\n"
        "load_tensors:      Vulkan0 model buffer size =    92.10 MiB\n"
        "llama_kv_cache:    Vulkan0 KV buffer size =   {kv} MiB\n"
        "sched_reserve:    Vulkan0 compute buffer size =    97.12 MiB\n"
        "sched_reserve: Vulkan_Host compute buffer size =   169.01 MiB\n"
    )
    buffers = buffers_from_log(load.format(kv="180.00") + load.format(kv="90.00"))
    assert buffers == {
        "CPU_Mapped": {"model": int(28.69 * MiB)},
        "Vulkan0": {"model": int(92.10 * MiB), "KV": int(90.0 * MiB), "compute": int(97.12 * MiB)},
        "Vulkan_Host": {"compute": int(169.01 * MiB)},
    }
    assert buffers_from_log("nothing here") == {}
