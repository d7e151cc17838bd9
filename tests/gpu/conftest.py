"""The GPU tests: kvchat on a real ggml GPU backend, with the demo model.

CI runs them in a second virtual environment whose llama-cpp-python has
llama.cpp's Vulkan backend (.ci/vulkan), on Mesa's software Vulkan driver
(llvmpipe), with the variables llama.cpp needs to use it (.ci/run sets
them); .ci/gpu-check runs them on a real GPU. Elsewhere (a CPU-only build, or
no device) every test here is skipped, saying why.

llvmpipe is slow (a few tokens a second): prompts and replies stay tiny."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.models.devices import ComputeDevice, compute_devices, device_label

_LOG_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def _device() -> ComputeDevice | None:
    report = compute_devices()
    if report is None or not report.offload_devices:
        return None
    return report.offload_devices[0]


_DEVICE = _device()
_WHY = (
    "no GPU device: this llama-cpp-python has no GPU backend, or it found no device "
    "(.ci/vulkan builds one with Vulkan; on Mesa's software driver set "
    "GGML_VK_VISIBLE_DEVICES=0, as .ci/run does)"
)


@pytest.fixture(autouse=True)
def gpu_device() -> ComputeDevice:
    """The device layers go to; every test here is skipped without one."""
    if _DEVICE is None:
        pytest.skip(_WHY)
    return _DEVICE


@pytest.fixture
def device_name(gpu_device: ComputeDevice) -> str:
    """What the status bar calls the device: `Vulkan0 (llvmpipe)`."""
    return device_label(gpu_device)


@pytest.fixture
def llama_log(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "llama.log"


def offloaded(log: Path) -> tuple[int, int]:
    """llama.cpp's own count of the layers it offloaded at the last load."""
    found = _LOG_OFFLOADED.findall(log.read_text(encoding="utf-8", errors="replace"))
    assert found, "llama.cpp's log says nothing about offloading"
    done, total = found[-1]
    return int(done), int(total)
