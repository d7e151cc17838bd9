"""Instant resume: a conversation left is saved in the background; reopened in
a newly loaded model (a new process) it replies exactly as it would have with
the cache warm, evaluating only the new message. With the real demo model,
and with the scripted engine for what needs no model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chat.engine.kv_state import KvState, StateIdentity
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Finished
from chat.engine.state_cache import StateCache
from chat.session.resume import Resumer, conversation_id_of, conversation_key
from chat.settings.schema import ModelSettings, SamplingSettings
from tests.fakes import ScriptedEngine
from tests.faults import Fault

SEEDED = SamplingSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, max_tokens=24, seed=3)
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
DATABASE = Path("/data/conversations.db")
KEY = conversation_key(DATABASE, 7)

Load = Callable[..., LlamaEngine]


@pytest.fixture
def load(demo_model: Path, tmp_path: Path) -> Iterator[Load]:
    """Load the model anew, as a new process does (each closed after the test)."""
    engines: list[LlamaEngine] = []

    def loaded(n_ctx: int = 2048) -> LlamaEngine:
        engines.append(load_engine(demo_model, ModelSettings(n_ctx=n_ctx), tmp_path / "llama.log"))
        return engines[-1]

    yield loaded
    for engine in engines:
        engine.close()


def reply(engine: LlamaEngine, messages: list[dict[str, str]]) -> Finished:
    last = None
    for event in engine.stream_reply(messages, SEEDED, threading.Event()):
        if isinstance(event, Finished):
            last = event
    assert last is not None
    # As the app does after a seeded reply: the next one then evaluates only
    # the new message, and is the same warm, restored or from scratch.
    engine.rebatch_reply()
    return last


def chat(engine: LlamaEngine, *questions: str) -> list[dict[str, str]]:
    """A conversation of one turn per question, ready for the next user message."""
    messages = [SYSTEM]
    for question in questions:
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": reply(engine, messages).text})
    return messages


def resumer(folder: Path) -> Resumer:
    return Resumer(StateCache(folder, 1 << 30))


def test_a_conversation_reopened_in_a_new_process_resumes_instantly(
    load: Load, tmp_path: Path
) -> None:
    first = load()
    messages = chat(first, "Tell me about the sea.", "And about rivers?")
    saver = resumer(tmp_path / "cache")
    assert saver.save_in_background(first, KEY)
    assert saver.wait(10)
    turn = [*messages, {"role": "user", "content": "Which is older?"}]
    warm = reply(first, turn)

    second = load()
    again = resumer(tmp_path / "cache")  # a new process: only the folder is shared
    assert again.resumable(second, DATABASE) == {7}
    prompt = second.tokenize_chat(turn)
    restored = again.restore_for(second, prompt)
    assert restored > len(prompt) / 2
    resumed = reply(second, turn)
    assert resumed.text == warm.text  # the same seed, the same reply
    assert resumed.stats.prompt_evaluated == warm.stats.prompt_evaluated
    assert resumed.stats.prompt_evaluated == len(prompt) - restored
    assert again.restore_for(second, prompt) == 0  # the cache holds it now


def test_switching_back_to_a_branch_restores_its_state(load: Load, tmp_path: Path) -> None:
    engine = load()
    saver = resumer(tmp_path / "cache")
    start = chat(engine, "Name a fruit.")
    branch_a = chat_from(engine, start, "Describe it in one sentence.")
    assert saver.save_in_background(engine, KEY)
    branch_b = chat_from(engine, start, "Now name a vegetable.")  # an edited message
    assert saver.save_in_background(engine, KEY)
    assert saver.wait(10)
    turn_a = [*branch_a, {"role": "user", "content": "Thanks."}]
    prompt = engine.tokenize_chat(turn_a)
    held_before = engine.cached_prefix(prompt)
    restored = saver.restore_for(engine, prompt)
    assert restored > held_before  # branch A's state holds more than branch B's cache
    after = reply(engine, turn_a)
    assert after.stats.prompt_evaluated == len(prompt) - restored
    # Exactly what a warm engine that never left branch A replies.
    warm_engine = load()
    warm_engine.restore_state(_state_of(saver, warm_engine, turn_a))
    assert reply(warm_engine, turn_a).text == after.text
    assert len(branch_b) == len(branch_a)


def chat_from(
    engine: LlamaEngine, messages: list[dict[str, str]], question: str
) -> list[dict[str, str]]:
    turn = [*messages, {"role": "user", "content": question}]
    return [*turn, {"role": "assistant", "content": reply(engine, turn).text}]


def _state_of(saver: Resumer, engine: LlamaEngine, messages: list[dict[str, str]]) -> KvState:
    found = saver.cache.find(engine.state_identity(), engine.tokenize_chat(messages))
    assert found is not None
    return found


def test_a_state_for_another_context_size_is_not_used(load: Load, tmp_path: Path) -> None:
    engine = load()
    messages = chat(engine, "Tell me about the sea.")
    saver = resumer(tmp_path / "cache")
    saver.save_in_background(engine, KEY)
    saver.wait(10)
    other = load(n_ctx=1024)
    turn = [*messages, {"role": "user", "content": "More."}]
    assert saver.resumable(other, DATABASE) == set()
    assert saver.restore_for(other, other.tokenize_chat(turn)) == 0
    cold = reply(other, turn)
    assert cold.stats.prompt_evaluated == cold.stats.prompt_tokens


def test_a_read_only_cache_folder_breaks_nothing(load: Load, read_only_folder: Fault) -> None:
    engine = load()
    messages = chat(engine, "Name a colour.")
    saver = resumer(read_only_folder.folder / "kv-states")
    saver.save_in_background(engine, KEY)
    assert saver.wait(10)
    assert saver.problem() is not None
    turn = [*messages, {"role": "user", "content": "Another."}]
    assert saver.restore_for(engine, engine.tokenize_chat(turn)) == 0
    assert reply(engine, turn).stats.generated_tokens > 0


# --- no model needed ----------------------------------------------------------------


class SlowCache(StateCache):
    """A cache whose writes wait for `go`."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, 1 << 30)
        self.go = threading.Event()

    def put(self, state: KvState, identity: StateIdentity, conversation_key: str) -> bool:
        self.go.wait(10)
        return super().put(state, identity, conversation_key)


def scripted_turn(engine: ScriptedEngine, words: str) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": words}]
    for _ in engine.stream_reply(messages, SEEDED, threading.Event()):
        pass
    return messages


def test_a_conversation_reopened_while_its_state_is_written_finds_it(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    cache = SlowCache(tmp_path)
    saver = Resumer(cache)
    messages = scripted_turn(engine, "one two three four")
    assert saver.save_in_background(engine, KEY)  # returns at once: the write waits
    assert saver.resumable(engine, DATABASE) == {7}
    engine.reset()
    prompt = engine.tokenize_chat([*messages, {"role": "user", "content": "more"}])
    assert saver.restore_for(engine, prompt) > 0
    assert len(engine.restored) == 1
    assert not saver.wait(0.05)  # still being written
    cache.go.set()
    assert saver.wait(10)
    assert cache.resumable(engine.state_identity()) == {KEY}


def test_nothing_to_save(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    saver = resumer(tmp_path)
    assert not saver.save_in_background(engine, KEY)  # an empty cache
    scripted_turn(engine, "hello there")
    assert not Resumer(StateCache(tmp_path, 0)).save_in_background(engine, KEY)  # limit 0
    assert saver.wait(1)
    assert saver.restore_for(engine, engine.tokenize_chat([])) == 0


def test_a_closed_engine_saves_nothing(load: Load, tmp_path: Path) -> None:
    engine = load()
    chat(engine, "Hi.")
    engine.close()
    assert not resumer(tmp_path).save_in_background(engine, KEY)


def test_a_key_names_its_conversation_only_in_its_own_database() -> None:
    assert conversation_id_of(KEY, DATABASE) == 7
    assert conversation_id_of(KEY, Path("/other/conversations.db")) is None
    assert conversation_id_of(f"{DATABASE}#x", DATABASE) is None
