"""`chat --list-models` and the model picker (F8) compare each model's
estimate with the device's free memory, as ggml reports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from chat.models.devices import ComputeDevice
from chat.models.memory import estimate_memory
from chat.models.metadata import read_metadata
from chat.models.sizes import human_bytes
from chat.ui.screens.model_picker import ModelPickerScreen
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready


def _chat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chat", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )


@pytest.mark.model
def test_list_models_compares_with_the_devices_free_memory(
    demo_model: Path, gpu_device: ComputeDevice
) -> None:
    done = _chat("--list-models", "--ctx", "4096")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if demo_model.stem in line)
    estimate = estimate_memory(read_metadata(demo_model), 4096, "f16", "f16", on_gpu=True)
    assert f"{human_bytes(estimate.total)} at 4,096 ctx on {gpu_device.name}" in line
    assert f"of GPU memory on {gpu_device.name}" in done.stdout

    data = json.loads(_chat("--list-models", "--json", "--ctx", "4096").stdout)
    rows = data if isinstance(data, list) else data["models"]
    row = next(r for r in rows if Path(r["path"]).resolve() == demo_model.resolve())
    text = json.dumps(row)
    assert gpu_device.name in text, text


async def test_the_picker_compares_with_the_devices_free_memory(
    gpu_device: ComputeDevice,
) -> None:
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("f8")
        await wait_for(lambda: isinstance(app.screen, ModelPickerScreen), pilot)
        table = app.screen.query_one(DataTable)
        await wait_for(lambda: table.row_count > 0, pilot, timeout=30)
        row = next(
            table.get_row_at(i)
            for i in range(table.row_count)
            if "SmolLM2" in str(table.get_row_at(i)[0])
        )
        assert str(row[1]).endswith(f"on {gpu_device.name}"), row
        status = str(app.screen.query_one("#models-status", Static).render())
        assert f"of GPU memory on {gpu_device.name}" in status, status
