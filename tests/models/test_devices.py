"""The compute devices llama.cpp reports, and which memory the model table
compares an estimate with: free RAM, or the GPU's free memory when every layer
is offloaded. This machine has no GPU: the GPU cases use a made-up device list."""

from __future__ import annotations

import ctypes
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chat.models import devices as devices_module
from chat.models.catalog import ModelEntry
from chat.models.devices import ComputeDevice, DeviceReport, compute_devices, ggml_library
from chat.models.memory import (
    GPU_MEMORY,
    RAM,
    available_ram,
    estimate_memory,
    key_cache_type,
    memory_budget,
)
from chat.models.metadata import read_metadata
from chat.models.table import budgets_text, model_rows
from tests.models.gguf_files import llama_fields, write_gguf

GiB = 1024**3
MiB = 1024**2


def _mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def _device(name: str, kind: str, free: int, total: int | None = None) -> ComputeDevice:
    backend = name.rstrip("0123456789")
    return ComputeDevice(name, f"{name} card", kind, backend, free, total or free)


CPU = _device("CPU", "cpu", 64 * GiB)
CUDA0 = _device("CUDA0", "gpu", 20 * GiB, 24 * GiB)
CUDA1 = _device("CUDA1", "gpu", 10 * GiB, 24 * GiB)
IGPU = _device("Vulkan0", "igpu", 12 * GiB, 16 * GiB)
ONE_GPU = DeviceReport((CPU, CUDA0), gpu_offload=True)
CPU_BUILD = DeviceReport((CPU,), gpu_offload=False)


# The installed build, as it is.


def test_the_installed_build_reports_the_cpu_with_the_machines_memory() -> None:
    report = compute_devices()
    assert report is not None, "ggml's device API could not be read from llama_cpp's library"
    (cpu,) = [device for device in report.devices if device.kind == "cpu"]
    assert cpu.name == "CPU" and cpu.backend == "CPU"
    assert cpu.total == pytest.approx(_mem_total(), rel=0.03)
    if not report.gpu_offload:
        # This machine's CPU-only build: the CPU alone (BLAS would add an accelerator).
        assert [d.kind for d in report.devices if d.kind != "accel"] == ["cpu"]
        assert report.offload_devices == ()
        budget = memory_budget(5 * GiB, -1, 30, report)
        assert (budget.available, budget.memory, budget.cpu_only) == (5 * GiB, RAM, True)


def test_without_a_gpu_the_table_compares_with_free_ram(tmp_path: Path) -> None:
    report = compute_devices()
    if report is None or report.gpu_offload:
        pytest.skip("this build has a GPU to offload to")
    model = write_gguf(tmp_path / "tiny.gguf", llama_fields(), padding=MiB)
    entry = ModelEntry(model, "tiny", "test", model.stat().st_size, (model,))
    (row,) = model_rows(entries=[entry], n_gpu_layers=-1)
    assert row.budget.memory == RAM and not row.budget.devices
    ram = available_ram()
    assert ram is not None and row.budget.available is not None
    assert row.budget.available == pytest.approx(ram, rel=0.05)  # MemAvailable moves a little
    assert row.memory_text().endswith(" ctx")  # no device named on the CPU
    assert "CPU only" in (budgets_text([row]) or "")
    # No layer asked on the GPU: plain RAM, no "CPU only".
    (row,) = model_rows(entries=[entry], n_gpu_layers=0)
    assert row.budget.available is not None
    assert budgets_text([row]) == f"{_human(row.budget.available)} of RAM"


def _human(size: int) -> str:
    from chat.models.table import human_bytes

    return human_bytes(size)


# When ggml cannot be read: "unknown", never an exception.


class _Without:
    """A library that lacks one function (an older build)."""

    def __init__(self, library: Any, missing: str) -> None:
        self._library, self._missing = library, missing

    def __getitem__(self, symbol: str) -> Any:
        if symbol == self._missing:
            raise AttributeError(symbol)
        return self._library[symbol]


def _llama_lib_folder() -> Path:
    from llama_cpp import llama_cpp as bindings

    return Path(bindings._base_path)


def test_a_missing_function_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_cpp import llama_cpp as bindings

    real = ggml_library(bindings)
    assert real is not None
    for symbol in ("ggml_backend_dev_memory", "ggml_backend_dev_type", "ggml_backend_reg_name"):
        monkeypatch.setattr(devices_module, "ggml_library", lambda _, s=symbol: _Without(real, s))
        assert compute_devices() is None


def test_a_library_without_the_device_api_is_unknown(tmp_path: Path) -> None:
    # libggml-base holds the device functions but not the list of devices,
    # which is in libggml: as if llama_cpp's handle were an older library.
    base = ctypes.CDLL(str(_llama_lib_folder() / "libggml-base.so"))
    assert ggml_library(SimpleNamespace(_lib=base, _base_path=tmp_path)) is None
    # And with no library in the folder at all.
    assert ggml_library(SimpleNamespace(_lib=object(), _base_path=tmp_path)) is None
    assert ggml_library(SimpleNamespace()) is None


def test_a_missing_library_is_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from llama_cpp import llama_cpp as bindings

    monkeypatch.setattr(bindings, "_lib", object())
    monkeypatch.setattr(bindings, "_base_path", tmp_path)
    assert compute_devices() is None


def test_llama_cpp_failing_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp

    def broken() -> bool:
        raise OSError("undefined symbol: llama_supports_gpu_offload")

    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", broken)
    assert compute_devices() is None


def test_device_type_two_is_an_accelerator_in_a_build_that_cannot_offload() -> None:
    # Before September 2025 ggml had no IGPU type and 2 meant ACCEL (BLAS).
    assert devices_module._kind(2, gpu_offload=False) == "accel"
    assert devices_module._kind(2, gpu_offload=True) == "igpu"
    assert [devices_module._kind(code, True) for code in (0, 1, 3, 4, 9)] == [
        "cpu",
        "gpu",
        "accel",
        "meta",
        "other",
    ]


# Which memory is compared, with made-up devices.


def test_every_layer_on_the_gpu_is_compared_with_its_free_memory() -> None:
    budget = memory_budget(30 * GiB, -1, 24, ONE_GPU)
    assert (budget.available, budget.memory, budget.devices) == (20 * GiB, GPU_MEMORY, ("CUDA0",))
    assert budget.on_gpu
    # llama.cpp counts the output layer as one more layer and offloads it
    # first: 24 of a 24-layer model leaves its first layer on the CPU, 25 or
    # more is every layer.
    assert memory_budget(30 * GiB, 24, 24, ONE_GPU).memory == RAM
    assert memory_budget(30 * GiB, 25, 24, ONE_GPU).available == 20 * GiB
    assert memory_budget(30 * GiB, 99, 24, ONE_GPU).available == 20 * GiB


def test_no_layer_on_the_gpu_is_compared_with_free_ram() -> None:
    budget = memory_budget(30 * GiB, 0, 24, ONE_GPU)
    assert (budget.available, budget.memory, budget.devices) == (30 * GiB, RAM, ())
    assert not budget.on_gpu and not budget.cpu_only


def test_some_layers_on_the_gpu_are_compared_with_ram_and_named() -> None:
    budget = memory_budget(30 * GiB, 10, 24, ONE_GPU)
    assert (budget.available, budget.memory) == (30 * GiB, RAM)
    assert (budget.devices, budget.gpu_layers, budget.n_layers) == (("CUDA0",), 10, 24)


def test_layers_spread_over_every_gpu_and_integrated_ones_only_without_one() -> None:
    two = DeviceReport((CPU, CUDA0, CUDA1, IGPU), gpu_offload=True)
    budget = memory_budget(30 * GiB, -1, 24, two)
    assert (budget.available, budget.devices) == (30 * GiB, ("CUDA0", "CUDA1"))
    integrated = DeviceReport((CPU, IGPU), gpu_offload=True)
    assert memory_budget(30 * GiB, -1, 24, integrated).devices == ("Vulkan0",)


def test_a_cpu_only_build_or_unknown_devices_use_ram() -> None:
    budget = memory_budget(30 * GiB, -1, 24, CPU_BUILD)
    assert (budget.available, budget.memory, budget.cpu_only) == (30 * GiB, RAM, True)
    unknown = memory_budget(30 * GiB, -1, 24, None)
    assert (unknown.available, unknown.memory, unknown.cpu_only) == (30 * GiB, RAM, False)
    # A GPU without memory to report (BLAS read as a device) holds nothing.
    empty = DeviceReport((CPU, _device("BLAS", "igpu", 0, 0)), gpu_offload=True)
    assert memory_budget(30 * GiB, -1, 24, empty).memory == RAM


def test_auto_key_cache_type_follows_where_the_layers_run() -> None:
    assert key_cache_type("auto", -1, ONE_GPU) == "f16"
    assert key_cache_type("auto", 10, ONE_GPU) == "f16"
    assert key_cache_type("auto", 0, ONE_GPU) == "q8_0"
    assert key_cache_type("auto", -1, CPU_BUILD) == "q8_0"
    assert key_cache_type("auto", -1, None) == "q8_0"
    assert key_cache_type("f16", 0, CPU_BUILD) == "f16"


def _tiny_entry(tmp_path: Path, **fields: object) -> ModelEntry:
    model = write_gguf(tmp_path / "tiny.gguf", llama_fields(**fields), padding=100 * MiB)
    return ModelEntry(model, "tiny", "test", model.stat().st_size, (model,))


def test_the_table_says_which_memory_it_compared_with(tmp_path: Path) -> None:
    entry = _tiny_entry(tmp_path, **{"llama.context_length": 131072})
    meta = read_metadata(entry.path)
    at_4k = estimate_memory(meta, 4096, "f16", "f16").total
    small_gpu = DeviceReport((CPU, _device("CUDA0", "gpu", at_4k, 8 * GiB)), gpu_offload=True)

    (row,) = model_rows(4096, "auto", entries=[entry], n_gpu_layers=-1, devices=small_gpu)
    assert row.memory is not None and row.memory.total == at_4k  # f16 keys on the GPU
    assert row.fits is True
    assert row.memory_text() == f"{_human(at_4k)} at 4,096 ctx on CUDA0"
    assert budgets_text([row]) == f"{_human(at_4k)} of GPU memory on CUDA0"

    (row,) = model_rows(0, "auto", entries=[entry], n_gpu_layers=-1, devices=small_gpu)
    assert row.fits is False and row.largest_context == 4096
    assert row.memory_text().endswith("ctx on CUDA0: too big, fits up to 4,096 ctx")

    (row,) = model_rows(4096, "auto", entries=[entry], n_gpu_layers=2, devices=small_gpu)
    assert row.budget.memory == RAM
    assert row.memory_text().endswith("at 4,096 ctx, 2/4 layers on GPU")
    assert "2 of 4 layers on CUDA0 not counted" in (budgets_text([row]) or "")


def test_list_models_prints_the_gpu_it_compared_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat.cli.models import print_models
    from chat.models import table
    from chat.settings.schema import ModelSettings

    entry = _tiny_entry(tmp_path)
    monkeypatch.setattr(table, "find_models", lambda: [entry])
    monkeypatch.setattr(table, "compute_devices", lambda: ONE_GPU)
    out = io.StringIO()
    assert print_models(ModelSettings(n_gpu_layers=-1), as_json=False, out=out) == 0
    text = out.getvalue()
    assert "ctx on CUDA0" in text
    assert "Free memory now: 20.0 GiB of GPU memory on CUDA0." in text

    out = io.StringIO()
    print_models(ModelSettings(n_gpu_layers=-1), as_json=True, out=out)
    import json

    (row,) = json.loads(out.getvalue())
    assert row["memory"]["compared_with"] == "GPU memory"
    assert (row["memory"]["available"], row["memory"]["devices"]) == (20 * GiB, ["CUDA0"])
