"""Thread counts: what is measured, what is chosen, what is remembered."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from chat import paths
from chat.engine.protocol import Engine, Finished
from chat.engine.threads import (
    Measured,
    RememberedRates,
    ThreadCounts,
    calibrate,
    candidates,
    choose_threads,
    machine_key,
    usable_cores,
)
from chat.runtime.model_loader import load_llama
from chat.settings.schema import ModelSettings, SamplingSettings


def test_candidates_cover_small_machines_and_sample_large_ones() -> None:
    assert candidates(1) == [1]
    assert candidates(2) == [1, 2]
    assert candidates(4) == [1, 2, 3, 4]
    assert candidates(16) == [1, 4, 8, 12, 15, 16]


def test_the_app_decodes_with_every_core_and_names_a_count_for_a_busy_machine() -> None:
    # Two cores, both faster: the app decodes with both, and with one while
    # something else takes a core (chat.engine.decode_threads).
    measured = Measured(decode={1: 100.0, 2: 170.0}, batch={1: 255.0, 2: 490.0})
    assert measured.best(spare_core=True) == ThreadCounts(2, 2, busy=1, busy_batch=1)
    assert measured.best(spare_core=True).batch_while(1) == 1
    assert measured.best(spare_core=True).batch_while(2) == 2
    # One-shot mode has no UI: the fastest, nothing more.
    assert measured.best(spare_core=False) == ThreadCounts(2, 2)
    # Where a count that leaves a core is as fast, it is the count, busy or not.
    assert Measured({1: 100.0, 2: 104.0}, {1: 1.0}).best(spare_core=True) == ThreadCounts(1, 1)
    assert Measured({4: 40.0, 6: 50.0, 8: 45.0}, {8: 1.0}).best(True) == ThreadCounts(6, 8)
    # One core: nothing to leave.
    assert Measured({1: 50.0}, {1: 80.0}).best(spare_core=True) == ThreadCounts(1, 1)


def test_counts_within_five_percent_of_the_fastest_go_to_the_fewest() -> None:
    measured = Measured(decode={1: 10.0, 4: 40.0, 8: 41.0, 12: 30.0, 16: 20.0}, batch={16: 1.0})
    assert measured.best(spare_core=True).decode == 4


def test_calibrate_keeps_each_counts_better_try() -> None:
    tries = iter([10.0, 20.0, 30.0, 5.0])  # decode 1, decode 2, then again
    measured = calibrate(lambda n: next(tries), lambda n: float(n), [1, 2])
    assert measured.decode == {1: 30.0, 2: 20.0}
    assert measured.batch == {1: 1.0, 2: 2.0}


class Measures:
    def __init__(self, measured: Measured | Exception) -> None:
        self.measured = measured
        self.calls = 0

    def __call__(self, counts: Sequence[int]) -> Measured:
        self.calls += 1
        if isinstance(self.measured, Exception):
            raise self.measured
        return self.measured


FAST_WITH_TWO = Measured(decode={1: 100.0, 2: 170.0}, batch={1: 100.0, 2: 190.0})


def test_measured_once_then_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("chat.engine.threads.usable_cores", lambda: 2)  # the rates' counts
    remembered = RememberedRates(tmp_path / "cache" / "threads.json")
    measure = Measures(FAST_WITH_TWO)
    first = choose_threads(None, None, measure, remembered, "model-a")
    again = choose_threads(None, None, measure, remembered, "model-a")
    assert first == ThreadCounts(2, 2, "measured", busy=1, busy_batch=1)
    assert again == ThreadCounts(2, 2, "remembered", busy=1, busy_batch=1)
    assert measure.calls == 1
    # Another model is measured on its own.
    choose_threads(None, None, measure, remembered, "model-b")
    assert measure.calls == 2
    # One-shot mode reads the same rates, with no count for a busy machine.
    one_shot = choose_threads(None, None, measure, remembered, "model-a", spare_core=False)
    assert one_shot == ThreadCounts(2, 2, "remembered")
    assert measure.calls == 2


def test_the_settings_override_either_count(tmp_path: Path) -> None:
    remembered = RememberedRates(tmp_path / "threads.json")
    measure = Measures(FAST_WITH_TWO)
    assert choose_threads(3, 5, measure, remembered, "m") == ThreadCounts(3, 5, "set")
    assert measure.calls == 0
    assert choose_threads(3, None, measure, remembered, "m") == ThreadCounts(3, 2, "set")
    assert choose_threads(None, 4, measure, remembered, "m") == ThreadCounts(2, 4, "set", busy=1)


def test_a_failed_measure_falls_back_to_llama_cpp_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chat.engine.threads.usable_cores", lambda: 8)
    remembered = RememberedRates(tmp_path / "threads.json")
    counts = choose_threads(None, None, Measures(RuntimeError("boom")), remembered, "m")
    assert counts == ThreadCounts(4, 8, "default")
    assert not (tmp_path / "threads.json").exists()  # measured again next time


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        '{"k": {"decode": {"x": 1}, "quiet": true}}',
        '{"k": {"decode": {}, "batch": {}, "quiet": true}}',
        '{"k": {"decode": {"1": NaN, "2": 5}, "batch": {"1": 1}, "quiet": true}}',
        '{"k": {"decode": {"1": -1, "2": Infinity}, "batch": {"1": 1}, "quiet": true}}',
        '{"k": {"decode": {"1": 3, "9999999": 5}, "batch": {"1": 1}, "quiet": true}}',
        '{"k": {"decode": {"1": 3}, "batch": {"1": 0}, "quiet": true}}',
        '{"k": {"decode": {"1": 1%s}, "batch": {"1": 1}, "quiet": true}}' % ("0" * 400),
    ],
)
def test_an_unreadable_file_only_means_measuring_again(
    tmp_path: Path, content: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chat.engine.threads.usable_cores", lambda: 2)  # the rates' counts
    path = tmp_path / "threads.json"
    path.write_text(content)
    remembered = RememberedRates(path)
    assert remembered.get("k") is None
    remembered.put("k", FAST_WITH_TWO)
    assert remembered.get("k") == FAST_WITH_TWO
    assert set(json.loads(path.read_text())["k"]) == {"decode", "batch", "when", "quiet"}


@pytest.mark.parametrize(
    ("looks", "remembered_after"),
    [
        ((True, True), False),  # another program ran through the measure
        ((True, False), True),  # seen at one look only: a moment's work
        ((False, True), True),
        ((False, False), True),
    ],
)
def test_a_measure_taken_while_another_program_runs_serves_this_run_only(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    looks: tuple[bool, bool],
    remembered_after: bool,
) -> None:
    monkeypatch.setattr("chat.engine.threads.usable_cores", lambda: 2)
    remembered = RememberedRates(tmp_path / "threads.json")
    measure = Measures(FAST_WITH_TWO)
    seen = iter(looks)
    counts = choose_threads(None, None, measure, remembered, "m", others_running=lambda: next(seen))
    assert counts == ThreadCounts(2, 2, "measured", busy=1, busy_batch=1)
    assert (remembered.get(f"{machine_key()} | m") is not None) == remembered_after
    choose_threads(None, None, measure, remembered, "m")
    assert measure.calls == (1 if remembered_after else 2)


def test_rates_remembered_without_the_quiet_mark_are_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry written before kvchat looked at the machine as it measured
    (as this project's machine had one: one thread faster at both, measured
    during a test run) is measured again, once."""
    monkeypatch.setattr("chat.engine.threads.usable_cores", lambda: 2)
    path = tmp_path / "threads.json"
    key = f"{machine_key()} | m"
    old_entry = {"batch": {"1": 113.9, "2": 84.8}, "decode": {"1": 46.0, "2": 29.1}, "when": "x"}
    path.write_text(json.dumps({key: old_entry}))
    remembered = RememberedRates(path)
    measure = Measures(FAST_WITH_TWO)
    assert choose_threads(None, None, measure, remembered, "m").decode == 2
    assert choose_threads(None, None, measure, remembered, "m").how == "remembered"
    assert measure.calls == 1
    assert json.loads(path.read_text())[key]["quiet"] is True


def test_a_file_that_cannot_be_written_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_text("a file where the folder would go")
    remembered = RememberedRates(tmp_path / "blocked" / "threads.json")
    counts = choose_threads(None, None, Measures(FAST_WITH_TWO), remembered, "m")
    assert counts == ThreadCounts(2, 2, "measured", busy=1, busy_batch=1)


# --- with the real demo model ---------------------------------------------------------


@pytest.mark.model
def test_the_app_measures_once_per_machine_and_model(demo_model: Path) -> None:
    first = load_llama(demo_model, ModelSettings(n_ctx=1024))
    try:
        counts = first.info.threads
        assert counts is not None and counts.how == "measured"
        rates = json.loads((paths.cache_dir() / "threads.json").read_text())
        (entry,) = rates.values()
        assert set(entry["decode"]) == {str(n) for n in candidates(usable_cores())}
        assert all(rate > 0 for rate in entry["decode"].values())
        # The measure left nothing in the KV cache, and replies run at the counts chosen.
        assert first.cached_prefix([1, 2, 3]) == 0
        reply = finished_reply(first)
        assert reply.stats.generated_tokens > 0
        # The measure's batches are not counted as the reply's (they were, as
        # "evaluated 203, reused from cache -174", until llama.cpp was synced).
        assert reply.stats.prompt_evaluated == reply.stats.prompt_tokens
    finally:
        first.close()
    again = load_llama(demo_model, ModelSettings(n_ctx=1024))
    try:
        assert again.info.threads == replace(counts, how="remembered")
    finally:
        again.close()
    pinned = load_llama(demo_model, ModelSettings(n_ctx=1024, n_threads=1, n_threads_batch=1))
    try:
        assert pinned.info.threads == ThreadCounts(1, 1, "set")
        assert pinned.llama.context_params.n_threads == 1
    finally:
        pinned.close()


@pytest.mark.model
def test_a_measure_taken_while_a_program_holds_every_core_is_measured_again(
    demo_model: Path,
) -> None:
    """A program busy on every core through the model's load (one spinning
    process a core): the counts measured serve that load, nothing is
    remembered, and the next load, on a quiet machine, measures again."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(usable_cores())
    ]
    try:
        time.sleep(0.5)  # running before the load looks
        busy = load_llama(demo_model, ModelSettings(n_ctx=1024))
        try:
            assert busy.info.threads is not None and busy.info.threads.how == "measured"
        finally:
            busy.close()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert not (paths.cache_dir() / "threads.json").exists()
    quiet = load_llama(demo_model, ModelSettings(n_ctx=1024))
    try:
        assert quiet.info.threads is not None and quiet.info.threads.how == "measured"
    finally:
        quiet.close()
    assert (paths.cache_dir() / "threads.json").exists()


def finished_reply(engine: Engine) -> Finished:
    events = engine.stream_reply(
        [{"role": "user", "content": "Say hi."}],
        SamplingSettings(temperature=0.0, max_tokens=8),
        threading.Event(),
    )
    return next(event for event in events if isinstance(event, Finished))
