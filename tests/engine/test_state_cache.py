"""The folder of saved KV cache states: the longest prefix is found, a
conversation keeps its latest state, the size limit forgets the least recently
used, and a damaged file or an unwritable folder never stops anything."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chat.engine import llama_log
from chat.engine.kv_state import KvState
from chat.engine.state_cache import SUFFIX, StateCache
from tests.fakes import IDENTITY
from tests.faults import Fault

DATA = 10_000
"""Bytes of state data per test state: a file is a little more."""


def state(*tokens: int) -> KvState:
    return KvState(tokens, bytes([tokens[-1] % 256]) * DATA)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Path]:
    """kvchat's log, where unusable states are noted (put back afterwards)."""
    before = llama_log._path
    path = tmp_path / "llama.log"
    llama_log.open_log(path)
    yield path
    if before is not None:
        llama_log.open_log(before)


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*" + SUFFIX))


def test_find_returns_the_state_holding_the_longest_prefix(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, 1 << 30)
    assert cache.put(state(1, 2, 3), IDENTITY, "db#1")
    assert cache.put(state(1, 2, 9, 9, 9), IDENTITY, "db#2")
    assert cache.put(state(1, 2, 3, 4, 5), IDENTITY, "db#3")
    found = cache.find(IDENTITY, [1, 2, 3, 4, 7, 8])
    assert found is not None and found.tokens == (1, 2, 3, 4, 5)
    assert bytes(found.data) == bytes([5]) * DATA
    found = cache.find(IDENTITY, [1, 2, 9, 9])  # a state longer than the prompt helps too
    assert found is not None and found.tokens == (1, 2, 9, 9, 9)
    assert cache.find(IDENTITY, [7, 1, 2]) is None
    assert cache.find(IDENTITY, [1, 2, 3, 4], longer_than=4) is None


def test_only_the_exact_identity_is_found(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, 1 << 30)
    cache.put(state(1, 2, 3), IDENTITY, "db#1")
    assert cache.find(replace(IDENTITY, n_ctx=4096), [1, 2, 3, 4]) is None
    assert cache.find(replace(IDENTITY, model_hash="cd" * 32), [1, 2, 3, 4]) is None
    assert cache.resumable(IDENTITY) == {"db#1"}
    assert cache.resumable(replace(IDENTITY, n_ctx=4096)) == set()


def test_a_conversation_keeps_its_latest_state_and_its_other_branches(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, 1 << 30)
    cache.put(state(1, 2, 3), IDENTITY, "db#1")
    cache.put(state(1, 2, 3, 4, 5), IDENTITY, "db#1")  # the same branch, further on
    assert len(files(tmp_path)) == 1
    cache.put(state(1, 2, 7, 8), IDENTITY, "db#1")  # another branch
    assert len(files(tmp_path)) == 2
    cache.put(state(1, 2, 3), IDENTITY, "db#1")  # held by a state kept already
    assert len(files(tmp_path)) == 2
    cache.put(state(1, 2, 3), IDENTITY, "db#2")  # another conversation
    assert len(files(tmp_path)) == 3
    assert cache.resumable(IDENTITY) == {"db#1", "db#2"}
    assert cache.keys() == {"db#1", "db#2"}


def test_the_limit_forgets_the_least_recently_used(tmp_path: Path) -> None:
    probe = StateCache(tmp_path / "probe", 1 << 30)
    probe.put(state(1), IDENTITY, "x")
    size = files(tmp_path / "probe")[0].stat().st_size
    cache = StateCache(tmp_path / "cache", 3 * size + size // 2)
    for key in ("a", "b", "c"):
        assert cache.put(state(ord(key)), IDENTITY, key)
    assert cache.find(IDENTITY, [ord("a")]) is not None  # "a" used: "b" is now the oldest
    assert cache.put(state(ord("d")), IDENTITY, "d")
    assert cache.resumable(IDENTITY) == {"a", "c", "d"}
    assert cache.total_bytes() <= cache.limit_bytes
    assert cache.put(state(ord("e")), IDENTITY, "e")
    assert cache.resumable(IDENTITY) == {"a", "d", "e"}


def test_a_state_bigger_than_the_limit_is_not_saved(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, DATA // 2)
    assert not cache.put(state(1, 2), IDENTITY, "db#1")
    assert files(tmp_path) == []
    assert not StateCache(tmp_path, 0).put(state(1, 2), IDENTITY, "db#1")


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "foreign"])
def test_a_damaged_file_is_ignored_with_a_note(tmp_path: Path, log: Path, damage: str) -> None:
    folder = tmp_path / "states"
    cache = StateCache(folder, 1 << 30)
    cache.put(state(1, 2), IDENTITY, "db#1")
    cache.put(state(1, 2, 3, 4), IDENTITY, "db#2")
    best = next(
        p for p in files(folder) if p.stat().st_size == max(f.stat().st_size for f in files(folder))
    )
    whole = bytearray(best.read_bytes())
    if damage == "truncated":
        best.write_bytes(whole[: len(whole) - 100])
    elif damage == "corrupt":
        whole[-5] ^= 0xFF
        best.write_bytes(whole)
    else:
        best.write_bytes(os.urandom(len(whole)))
    fresh = StateCache(folder, 1 << 30)  # as in the next process
    found = fresh.find(IDENTITY, [1, 2, 3, 4, 5])
    assert found is not None and found.tokens == (1, 2)  # the next best
    noted = log.read_text()
    assert "a saved KV cache state is ignored" in noted and best.name in noted
    assert best.exists()  # kept as it is
    fresh.find(IDENTITY, [1, 2, 3, 4, 5])
    assert log.read_text().count(best.name) == 1  # noted once


def test_a_read_only_folder_saves_nothing_and_breaks_nothing(
    read_only_folder: Fault, log: Path
) -> None:
    folder = read_only_folder.folder / "states"
    cache = StateCache(folder, 1 << 30)
    assert not cache.put(state(1, 2, 3), IDENTITY, "db#1")
    problem = cache.problem()
    assert problem is not None and str(read_only_folder.folder) in problem
    assert "KV cache states are not saved" in log.read_text()
    assert cache.find(IDENTITY, [1, 2, 3]) is None
    assert cache.resumable(IDENTITY) == set()
    if read_only_folder.real:
        assert "read-only" in problem
        read_only_folder.heal()
        assert cache.put(state(1, 2, 3), IDENTITY, "db#1")
        assert cache.problem() is None
        read_only_folder.break_again()
        found = cache.find(IDENTITY, [1, 2, 3, 4])  # read, though its use is not recorded
        assert found is not None and found.tokens == (1, 2, 3)


def test_a_full_disk_leaves_no_partial_file(small_folder: Fault, log: Path) -> None:
    folder = small_folder.folder / "states"
    cache = StateCache(folder, 1 << 30)
    if small_folder.real:
        assert cache.put(state(1, 2), IDENTITY, "db#1")
    small_folder.break_again()
    big = KvState((1, 2, 3), b"\1" * (9 << 20))
    assert not cache.put(big, IDENTITY, "db#1")
    assert cache.problem() is not None
    if small_folder.real:
        assert "full" in str(cache.problem())
        assert [p.name for p in folder.iterdir()] == [files(folder)[0].name]
        found = cache.find(IDENTITY, [1, 2, 3])
        assert found is not None and found.tokens == (1, 2)
