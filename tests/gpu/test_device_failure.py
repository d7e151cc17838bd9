"""A Vulkan build whose loader finds no device (its drivers list pointed at
nothing, as when a driver is missing or broken): the model runs on the CPU,
and kvchat says so in one sentence, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chat.models.devices import ComputeDevice


def _no_device_env(tmp_path: Path) -> dict[str, str]:
    env = os.environ.copy()
    # The Vulkan loader reads its drivers from these files; none exists.
    env["VK_ICD_FILENAMES"] = str(tmp_path / "no-such-icd.json")
    env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"]
    return env


@pytest.mark.model
def test_no_device_falls_back_to_the_cpu_with_one_sentence(
    demo_model: Path, tmp_path: Path, gpu_device: ComputeDevice
) -> None:
    if gpu_device.backend != "Vulkan":
        pytest.skip("simulated through the Vulkan loader")
    done = subprocess.run(
        [sys.executable, "-m", "chat", "-p", "Hi", "--max-tokens", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_no_device_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (
        "chat: warning: no Vulkan device found: the model runs on the CPU."
    ), done.stderr
    data = json.loads(done.stdout)
    assert data["device"].startswith("CPU only (no Vulkan device found)"), data
    assert data["reply"]

    listed = subprocess.run(
        [sys.executable, "-m", "chat", "--list-models"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_no_device_env(tmp_path),
    )
    assert listed.returncode == 0, listed.stderr
    assert "of RAM (no Vulkan device found: the model runs on the CPU)" in listed.stdout
