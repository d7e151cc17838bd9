"""Instant resume on the device: a KV state saved with every layer offloaded
restores into a new engine, whose next reply evaluates only the new message;
the same seed gives the same reply warm, restored and from scratch; a state
made on the CPU is never used on the device, nor the reverse (their sums come
from other kernels: nothing proves the replies equal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chat.engine.kv_state import StateMismatchError, read_state, write_state
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Finished
from chat.settings.schema import ModelSettings, SamplingSettings
from tests.engine.test_kv_state import reply as seeded_reply

SEEDED = SamplingSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, max_tokens=4, seed=11)
SYSTEM = {"role": "system", "content": "Be brief."}


def reply(engine: LlamaEngine, messages: list[dict[str, str]]) -> Finished:
    return seeded_reply(engine, messages, SEEDED)


@pytest.fixture
def load(demo_model: Path, llama_log: Path) -> Iterator[Callable[..., LlamaEngine]]:
    engines: list[LlamaEngine] = []

    def loaded(gpu_layers: int = -1) -> LlamaEngine:
        settings = ModelSettings(n_ctx=512, n_gpu_layers=gpu_layers)
        engines.append(load_engine(demo_model, settings, llama_log))
        return engines[-1]

    yield loaded
    for engine in engines:
        engine.close()


@pytest.mark.model
def test_the_same_seed_gives_the_same_reply_warm_restored_and_from_scratch(
    load: Callable[..., LlamaEngine],
) -> None:
    warm = load()
    first = [SYSTEM, {"role": "user", "content": "Name a sea."}]
    answer = reply(warm, first)
    messages = [*first, {"role": "assistant", "content": answer.text}]
    messages.append({"role": "user", "content": "And a river?"})
    warm.rebatch_reply()  # as the app does after a seeded reply
    state = warm.save_state()
    assert state is not None and len(state.tokens) == warm.cached_tokens
    warm_reply = reply(warm, messages)

    restored = load()
    assert restored.state_identity() == warm.state_identity()
    assert restored.restore_state(state)
    restored_reply = reply(restored, messages)

    cold = load()
    cold_reply = reply(cold, messages)
    print(f"warm/restored/cold: {warm_reply.text!r}; evaluated {restored_reply.stats}")
    assert restored_reply.text == warm_reply.text == cold_reply.text
    assert cold_reply.stats.prompt_evaluated == cold_reply.stats.prompt_tokens
    # Only the new message, warm and restored.
    assert warm_reply.stats.prompt_evaluated == restored_reply.stats.prompt_evaluated
    assert restored_reply.stats.prompt_evaluated < restored_reply.stats.prompt_tokens / 2


@pytest.mark.model
def test_a_state_made_on_the_cpu_is_not_used_on_the_device(
    load: Callable[..., LlamaEngine], tmp_path: Path
) -> None:
    device = load()
    cpu = load(gpu_layers=0)
    assert device.state_identity() != cpu.state_identity()
    reply(cpu, [SYSTEM, {"role": "user", "content": "Hi"}])
    state = cpu.save_state()
    assert state is not None
    path = tmp_path / "cpu.kvstate"
    write_state(path, state, cpu.state_identity(), "db#1", 1.0)
    with pytest.raises(StateMismatchError):
        read_state(path, device.state_identity())
    # The reverse: a state saved on the device is not read for the CPU.
    reply(device, [SYSTEM, {"role": "user", "content": "Hi"}])
    on_device = device.save_state()
    assert on_device is not None
    write_state(path, on_device, device.state_identity(), "db#1", 1.0)
    with pytest.raises(StateMismatchError):
        read_state(path, cpu.state_identity())
    with pytest.raises(StateMismatchError):
        read_state(path, replace(device.state_identity(), gpu_layers=10))
