"""llama.cpp's log file: capped and rotated, and never a reason for a model not
to load or answer. Real model, real filesystem faults (tests/faults.py)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.engine import llama_log
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Finished
from chat.errors import ModelError
from chat.settings.schema import ModelSettings, SamplingSettings
from tests.faults import Fault


@pytest.fixture(autouse=True)
def no_unraisable(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """What ctypes would print on stderr (where Textual draws) had the log
    callback raised: "Exception ignored on calling ctypes callback function"."""
    caught: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)
    yield caught
    assert caught == [], [str(hook.exc_value) for hook in caught]


def answer(model: Path, log: Path) -> str:
    """Load the model with its log at `log` and get a short greedy reply."""
    engine = load_engine(model, ModelSettings(n_ctx=512), log)
    try:
        events = engine.stream_reply(
            [{"role": "user", "content": "Say hi."}],
            SamplingSettings(temperature=0.0, max_tokens=8),
            threading.Event(),
        )
        finished = [event for event in events if isinstance(event, Finished)]
    finally:
        engine.close()
    return finished[0].text


@pytest.mark.parametrize("fault_name", ["uncreatable_folder", "read_only_folder", "full_folder"])
def test_the_model_loads_and_answers_when_the_log_cannot_be_written(
    demo_model: Path, request: pytest.FixtureRequest, fault_name: str
) -> None:
    fault: Fault = request.getfixturevalue(fault_name)
    folder = fault.folder
    assert answer(demo_model, folder / "llama.log").strip()
    why = {
        "uncreatable": f"{folder} cannot be created: {folder.parent} is a file, not a folder",
        "read-only": f"{folder} is on a read-only disk",
        "full": f"the disk holding {folder} is full",
    }[fault.kind]
    assert llama_log.log_problem() == f"llama.cpp's log is not being written: {why}."


def test_a_log_that_works_again_is_written_again(demo_model: Path, small_folder: Fault) -> None:
    log = small_folder.folder / "llama.log"
    assert answer(demo_model, log).strip()
    assert llama_log.log_problem() is None
    written = log.stat().st_size
    assert written > 0
    small_folder.break_again()  # the disk fills up between two loads
    assert answer(demo_model, log).strip()
    if small_folder.real:
        assert "is full" in (llama_log.log_problem() or "")
    small_folder.heal()
    assert answer(demo_model, log).strip()
    assert llama_log.log_problem() is None
    assert log.stat().st_size > written


def test_the_log_is_rotated_at_its_limit(
    demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llama_log, "LOG_MAX_BYTES", 4096)  # one load writes more
    log = tmp_path / "state" / "llama.log"
    for _ in range(3):
        load_engine(demo_model, ModelSettings(n_ctx=512), log).close()
        llama_log.close_log()  # each start of kvchat opens the log anew
    kept = sorted(path.name for path in log.parent.iterdir())
    assert kept == ["llama.log", "llama.log.1"]  # LOG_BACKUPS older file, no more
    for path in log.parent.iterdir():
        assert 0 < path.stat().st_size <= 4096


def test_one_load_writes_kilobytes_not_hundreds(demo_model: Path, tmp_path: Path) -> None:
    # llama.cpp's DEBUG lines (one per layer, per token type) are left out.
    log = tmp_path / "llama.log"
    engine: LlamaEngine = load_engine(demo_model, ModelSettings(n_ctx=512), log)
    engine.close()
    text = log.read_text()
    assert "llama_model_loader: loaded meta data" in text
    assert "assigned to device" not in text
    assert log.stat().st_size < 50_000


def test_llama_cpp_pythons_own_load_lines_go_to_the_log_not_stderr(
    demo_model: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Its system info, the model's metadata and the template's tokens: after
    a quit while the model loaded, the terminal's stderr had them."""
    log = tmp_path / "llama.log"
    load_engine(demo_model, ModelSettings(n_ctx=512), log).close()
    printed = capfd.readouterr()
    assert "Model metadata" not in printed.err + printed.out
    assert "Using chat eos_token" not in printed.err + printed.out
    text = log.read_text()
    assert "Model metadata: {" in text and "Using chat eos_token: <|im_end|>" in text


def test_a_failed_load_names_no_log_that_was_not_written(
    demo_model: Path, tmp_path: Path, uncreatable_folder: Fault
) -> None:
    cut = tmp_path / "cut.gguf"
    with demo_model.open("rb") as whole:
        cut.write_bytes(whole.read(2_000_000))
    with pytest.raises(ModelError) as refused:
        load_engine(cut, ModelSettings(n_ctx=512), uncreatable_folder.folder / "llama.log")
    said = str(refused.value)
    assert "model is corrupted or incomplete" in said  # llama.cpp's reason, kept anyway
    assert "log" not in said


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "socket"])
def test_a_log_path_that_is_no_regular_file_is_not_opened(
    demo_model: Path, tmp_path: Path, kind: str
) -> None:
    """A FIFO there would block the load on opening it; a device would
    swallow the lines: neither is written, and the user is told why."""
    from tests.hostile_files import hostile_file, returns_within

    log = hostile_file(kind, tmp_path / "llama.log")
    assert returns_within(lambda: answer(demo_model, log), seconds=120).strip()
    assert llama_log.log_problem() == (
        f"llama.cpp's log is not being written: {log} is not a regular file."
    )
