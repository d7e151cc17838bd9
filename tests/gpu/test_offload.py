"""Layers on the device: how many, said by the status text and confirmed by
llama.cpp's log; the key cache type "auto" picks for a GPU; the memory
estimate against what llama.cpp allocated on the device."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from chat.engine.llama import load_engine
from chat.models.memory import MIB, buffers_from_log, estimate_memory
from chat.models.metadata import read_metadata
from chat.settings.schema import ModelSettings
from tests.gpu.conftest import offloaded


@pytest.mark.model
def test_every_layer_goes_to_the_device_by_default(
    demo_model: Path, llama_log: Path, device_name: str
) -> None:
    engine = load_engine(demo_model, ModelSettings(n_ctx=1024), llama_log)
    try:
        info = engine.info
        layers = info.n_layers + 1  # llama.cpp counts the output layer as one more
        assert info.device_text() == f"GPU: {layers}/{layers} layers · {device_name}"
        assert offloaded(llama_log) == (layers, layers)
        # "auto": llama.cpp's own f16 keys on a GPU (q8_0 is for the CPU).
        assert engine.llama.context_params.type_k == llama_cpp.GGML_TYPE_F16
        device = device_name.split(" ", 1)[0]
        buffers = buffers_from_log(llama_log.read_text(encoding="utf-8"))
        assert buffers[device]["KV"] > 0 and buffers[device]["model"] > 0
    finally:
        engine.close()


@pytest.mark.model
@pytest.mark.parametrize("layers", [10, 0])
def test_some_or_no_layers(demo_model: Path, llama_log: Path, layers: int) -> None:
    settings = ModelSettings(n_ctx=512, n_gpu_layers=layers)
    engine = load_engine(demo_model, settings, llama_log)
    try:
        total = engine.info.n_layers + 1
        assert offloaded(llama_log) == (layers, total)
        if layers:
            assert engine.info.device_text().startswith(f"GPU: {layers}/{total} layers · ")
            assert engine.llama.context_params.type_k == llama_cpp.GGML_TYPE_F16
        else:
            assert engine.info.device_text() == "CPU only (GPU layers set to 0)"
            assert engine.llama.context_params.type_k == llama_cpp.GGML_TYPE_Q8_0
    finally:
        engine.close()


@pytest.mark.model
def test_the_estimate_is_within_ten_percent_of_the_device_allocation(
    demo_model: Path, llama_log: Path, device_name: str
) -> None:
    """Every layer offloaded, 4,096 tokens: the estimate made for the GPU
    against the model, KV and compute buffers llama.cpp allocated on the
    device (its log). The token embedding table stays in RAM, as estimated.

    At 4,096 tokens one layer's attention scores (72 MiB here) fit in one
    buffer of llvmpipe's (128 MiB at most); at the model's 8,192 they do not,
    and llama.cpp computes them on the CPU instead: docs/gpu.md."""
    n_ctx = 4096
    engine = load_engine(demo_model, ModelSettings(n_ctx=n_ctx), llama_log)
    engine.close()
    meta = read_metadata(demo_model)
    estimate = estimate_memory(meta, n_ctx, "f16", "f16", on_gpu=True)
    buffers = buffers_from_log(llama_log.read_text(encoding="utf-8"))
    device = buffers[device_name.split(" ", 1)[0]]
    on_device = device["model"] + device["KV"] + device["compute"]
    print(
        f"estimate {estimate.total / MIB:.1f} MiB on the device (weights "
        f"{estimate.weights / MIB:.1f}, KV {estimate.kv_cache / MIB:.1f}, compute "
        f"{estimate.compute / MIB:.1f}; {estimate.host / MIB:.1f} in RAM); allocated "
        f"{on_device / MIB:.1f} MiB: {buffers}"
    )
    assert device["KV"] == pytest.approx(estimate.kv_cache, rel=0.01)
    assert on_device == pytest.approx(estimate.total, rel=0.10)
    # The input embedding, in RAM, as estimated.
    host_model = sum(
        kinds.get("model", 0) for name, kinds in buffers.items() if name.startswith("CPU")
    )
    assert host_model == pytest.approx(estimate.host, rel=0.02)
