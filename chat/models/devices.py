"""The compute devices of the installed llama.cpp build and the memory each has
free, as ggml itself reports them: the devices llama.cpp offloads layers to
(CUDA, ROCm, Vulkan, Metal, SYCL) and the CPU.

llama-cpp-python 0.3.x binds none of ggml's device API, but the libraries it
ships export it (`ggml-backend.h`): it is called here through ctypes, from the
library llama_cpp already loaded. Whatever goes wrong (an older build, a
missing symbol or library) makes the answer None, "unknown": never an error.

ggml's CPU device gives the machine's whole RAM as free (it does not measure
it), so free RAM comes from `memory.available_ram`, not from here. A GPU
backend answers with the driver's own figure (CUDA: `cudaMemGetInfo`, which
opens a context on the device, as loading a model does anyway).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
"""`enum ggml_backend_dev_type` of the llama.cpp in llama-cpp-python 0.3.36.
Builds older than September 2025 have no IGPU: there 2 is ACCEL (BLAS), see
`_kind`."""


@dataclass(frozen=True)
class ComputeDevice:
    """One ggml device and its memory in bytes."""

    name: str
    """ggml's name for it: "CPU", "CUDA0", "Vulkan1", "Metal"."""
    description: str
    """What it is: "NVIDIA GeForce RTX 4090", the CPU's model."""
    kind: str
    """"cpu", "gpu", "igpu" (a GPU sharing the host's memory), "accel" or "meta"."""
    backend: str
    """The backend that registered it: "CPU", "CUDA", "Vulkan", "RPC", ..."""
    free: int
    total: int


@dataclass(frozen=True)
class DeviceReport:
    """What the installed llama.cpp build can run on."""

    devices: tuple[ComputeDevice, ...]
    gpu_offload: bool
    """`llama_supports_gpu_offload()`: the build has a device to offload layers to."""
    gpu_backends: tuple[str, ...] = ()
    """The GPU backends built into llama.cpp ("CUDA", "Vulkan", ...), whether or
    not they found a device: a Vulkan build whose loader sees no driver
    registers no backend at all, but its library is there."""

    @property
    def missing_gpu(self) -> str | None:
        """Why a build with a GPU backend runs on the CPU, in words ("no
        Vulkan device found"); None when it has a GPU, or none was built in."""
        if self.gpu_offload or not self.gpu_backends:
            return None
        return f"no {' or '.join(self.gpu_backends)} device found"

    @property
    def offload_devices(self) -> tuple[ComputeDevice, ...]:
        """Where llama.cpp puts offloaded layers when it chooses itself
        (`llama_prepare_model_devices`): every GPU, else the integrated GPUs
        of the first backend that has one. Devices without memory are left out.

        llama.cpp also drops a GPU seen twice (by CUDA and Vulkan, say) by its
        PCI id, which this report does not read: such a card counts twice."""
        if not self.gpu_offload:
            return ()
        gpus = tuple(d for d in self.devices if d.kind == "gpu" and d.total > 0)
        if gpus:
            return gpus
        igpus = [d for d in self.devices if d.kind == "igpu" and d.total > 0]
        return tuple(d for d in igpus if d.backend == igpus[0].backend)


def compute_devices() -> DeviceReport | None:
    """The devices of the installed llama.cpp build; None when it cannot tell.
    Cheap (no model is loaded), but it imports llama_cpp: call it off the UI
    thread."""
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as bindings

        # Builds with dynamically loaded backends register none until asked:
        # like llama_backend_init, this loads them all when none is there yet.
        gpu_offload = bool(llama_cpp.llama_supports_gpu_offload())
        library = ggml_library(bindings)
        if library is None:
            return None
        devices = _list_devices(library, gpu_offload)
        return DeviceReport(devices, gpu_offload, _gpu_backends(library, devices))
    except Exception:  # a build this code does not know: "unknown", whatever the reason
        return None


def ggml_library(bindings: Any) -> Any:
    """A handle on which ggml's device functions resolve: llama_cpp's own
    handle on libllama (dlsym also searches the libraries it links, libggml and
    libggml-base), else libggml loaded from the folder llama_cpp loaded
    libllama from. None when neither has them."""
    library = getattr(bindings, "_lib", None)
    if library is not None and _has(library, "ggml_backend_dev_count"):
        return library
    base = getattr(bindings, "_base_path", None)
    if base is None:
        return None
    try:
        from llama_cpp._ctypes_extensions import load_shared_library

        library = load_shared_library("ggml", base)
    except Exception:
        return None
    return library if _has(library, "ggml_backend_dev_count") else None


def _has(library: Any, symbol: str) -> bool:
    try:
        library[symbol]
    except (AttributeError, TypeError, KeyError):
        return False
    return True


def _function(library: Any, symbol: str, result: Any, *arguments: Any) -> Callable[..., Any]:
    # `library[symbol]` is a new function object each time: the argument types
    # set here never change the ones llama_cpp set on its shared handle.
    function = library[symbol]
    function.restype = result
    function.argtypes = list(arguments)
    return function


def _list_devices(library: Any, gpu_offload: bool) -> tuple[ComputeDevice, ...]:
    """Raises AttributeError when a function is missing from the library."""
    device = ctypes.c_void_p
    size = ctypes.c_size_t
    count = _function(library, "ggml_backend_dev_count", size)
    get = _function(library, "ggml_backend_dev_get", device, size)
    name = _function(library, "ggml_backend_dev_name", ctypes.c_char_p, device)
    description = _function(library, "ggml_backend_dev_description", ctypes.c_char_p, device)
    kind = _function(library, "ggml_backend_dev_type", ctypes.c_int, device)
    memory = _function(
        library, "ggml_backend_dev_memory", None, device, ctypes.POINTER(size), ctypes.POINTER(size)
    )
    registry = _function(library, "ggml_backend_dev_backend_reg", ctypes.c_void_p, device)
    registry_name = _function(library, "ggml_backend_reg_name", ctypes.c_char_p, ctypes.c_void_p)

    raw = []
    for index in range(int(count())):
        handle = get(index)
        if not handle:
            continue
        free, total = size(0), size(0)
        memory(handle, ctypes.byref(free), ctypes.byref(total))
        reg = registry(handle)
        raw.append(
            (
                _text(name(handle)),
                _text(description(handle)),
                int(kind(handle)),
                _text(registry_name(reg)) if reg else "",
                int(free.value),
                int(total.value),
            )
        )
    return tuple(
        ComputeDevice(label, text, _kind(code, gpu_offload), backend, free, total)
        for label, text, code, backend, free, total in raw
    )


_GPU_BACKEND_SYMBOLS = {
    "CUDA": "ggml_backend_cuda_reg",
    "Vulkan": "ggml_backend_vk_reg",
    "Metal": "ggml_backend_metal_reg",
    "SYCL": "ggml_backend_sycl_reg",
    "OpenCL": "ggml_backend_opencl_reg",
}
"""Each GPU backend's registration function: exported by its library when it
is built in (ROCm builds compile the CUDA backend, and register as "ROCm")."""
_NOT_GPU_BACKENDS = ("CPU", "RPC", "BLAS")


def _gpu_backends(library: Any, devices: tuple[ComputeDevice, ...]) -> tuple[str, ...]:
    """The GPU backends of the build: those that registered devices, then those
    whose library is linked but registered nothing."""
    names = [d.backend for d in devices if d.backend and d.backend not in _NOT_GPU_BACKENDS]
    found = list(dict.fromkeys(names))
    for backend, symbol in _GPU_BACKEND_SYMBOLS.items():
        if backend == "CUDA" and "ROCm" in found:
            continue
        if backend not in found and _has(library, symbol):
            found.append(backend)
    return tuple(found)


def device_label(device: ComputeDevice) -> str:
    """`Vulkan0 (llvmpipe)`, `CUDA0 (NVIDIA GeForce RTX 4090)`: ggml's name and
    what the driver calls the device, without the driver's details in brackets."""
    what = device.description.split(" (", 1)[0].strip()
    return f"{device.name} ({what})" if what and what != device.name else device.name


def _kind(code: int, gpu_offload: bool) -> str:
    """The device type's name. Type 2 is IGPU in builds since September 2025
    and ACCEL (BLAS, zDNN) before. An integrated GPU makes
    `llama_supports_gpu_offload()` true: without offload, 2 is an accelerator.
    (An older build's BLAS beside a GPU reads as "igpu": harmless, layers go
    to the GPU then, and BLAS has no memory, so it never holds any.)"""
    if code == 2 and not gpu_offload:
        return "accel"
    return DEVICE_KINDS.get(code, "other")


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", errors="replace") if value else ""
