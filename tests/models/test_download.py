"""Downloading models from a Hugging Face Hub (a local mirror on loopback)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import pytest

from chat.models.catalog import ModelRoots, find_models
from chat.models.download import (
    HUB_CHUNK,
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    RemoteFile,
    choose_files,
    list_repo_models,
    pull,
)
from tests.models.gguf_files import gguf_bytes, llama_fields
from tests.models.hub_mirror import Hub, running_hub, wait_for

REPO = "org/Tiny-GGUF"
MiB = 1024 * 1024


def _model(size: int, seed: int) -> bytes:
    """A GGUF of `size` bytes whose weights differ with `seed`."""
    header = gguf_bytes(llama_fields())
    weights = bytes((seed + i) % 251 for i in range(251)) * (size // 251 + 1)
    return header + weights[: size - len(header)]


@pytest.fixture(autouse=True)
def hub_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no real token is read
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture
def hub() -> Iterator[Hub]:
    files = {
        "tiny-Q4_K_M.gguf": _model(300_000, 1),
        "tiny-Q8_0.gguf": _model(200_000, 2),
        "tiny-Q4_K_S.gguf": _model(3 * MiB, 3),
        "mmproj-tiny-f16.gguf": _model(50_000, 4),
        "README.md": b"# tiny",
        "F16/tiny-F16-00001-of-00002.gguf": _model(150_000, 5),
        "F16/tiny-F16-00002-of-00002.gguf": bytes(120_000),
    }
    with running_hub(Hub(files={REPO: files, "other/NoQ4": {"x-Q8_0.gguf": _model(9000, 6)}})) as h:
        yield h


def _ranges(hub: Hub, name: str) -> list[str | None]:
    """The Range headers of the GET requests for the file `name`."""
    return [r for method, p, r in hub.requests if method == "GET" and p.endswith(name)]


def _leftovers(folder: Path) -> list[str]:
    """Partial files and lock files under `folder`."""
    return sorted(
        p.name for p in folder.rglob("*") if p.name.endswith((".incomplete", ".lock", "-tmp"))
    )


class Reports:
    def __init__(self) -> None:
        self.seen: list[DownloadProgress] = []

    def __call__(self, report: DownloadProgress) -> None:
        self.seen.append(report)


def _pull(hub: Hub, spec: str, cache: Path, **kwargs: object) -> tuple[Path, Reports]:
    reports = Reports()
    cancel = kwargs.pop("cancel", threading.Event())
    path = pull(spec, reports, cancel, cache_dir=cache, endpoint=hub.url, **kwargs)  # type: ignore[arg-type]
    return path, reports


def test_the_quantization_asked_for_is_downloaded_into_the_hub_cache(
    hub: Hub, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path, reports = _pull(hub, f"{REPO}:q8_0", cache)
    assert path.name == "tiny-Q8_0.gguf"
    assert path.read_bytes() == hub.files[REPO]["tiny-Q8_0.gguf"]
    last = reports.seen[-1]
    assert (last.done, last.total, last.part, last.parts) == (200_000, 200_000, 1, 1)
    # kvchat finds it there afterwards, like any model in the hub cache.
    assert [e.name for e in find_models(ModelRoots(hf_cache=cache))] == [f"{REPO}/tiny-Q8_0.gguf"]
    # A second pull fetches nothing.
    hub.requests.clear()
    assert _pull(hub, f"{REPO}:Q8_0", cache)[0] == path
    assert not any(method == "GET" and "/resolve/" in p for method, p, _ in hub.requests)


def test_without_a_quantization_q4_k_m_is_taken(hub: Hub, tmp_path: Path) -> None:
    path, _ = _pull(hub, REPO, tmp_path / "cache")
    assert path.name == "tiny-Q4_K_M.gguf"


def test_a_repo_without_q4_k_m_lists_what_it_has(hub: Hub, tmp_path: Path) -> None:
    files = [RemoteFile("a-Q8_0.gguf", 8_000_000_000), RemoteFile("a-Q6_K.gguf", 6_100_000_000)]
    with pytest.raises(DownloadError) as raised:
        choose_files("org/a", files, None)
    assert str(raised.value) == (
        "org/a has no Q4_K_M file. It has: a-Q6_K.gguf (5.7 GiB); a-Q8_0.gguf (7.5 GiB). "
        "Pick one with org/a:QUANT."
    )
    with pytest.raises(DownloadError, match=r"No IQ2_XS file in org/Tiny-GGUF\. It has: .*"):
        _pull(hub, f"{REPO}:IQ2_XS", tmp_path / "cache")
    # The only model of a repo is taken whatever its quantization.
    assert _pull(hub, "other/NoQ4", tmp_path / "cache")[0].name == "x-Q8_0.gguf"


def test_ambiguous_quantization_prefers_the_whole_word() -> None:
    files = [
        RemoteFile("m-Q4_K_M.gguf", 1),
        RemoteFile("m-Q4_K_S.gguf", 1),
        RemoteFile("m-Q4_K.gguf", 1),
    ]
    assert [f.path for f in choose_files("o/m", files, "q4_k")] == ["m-Q4_K.gguf"]
    with pytest.raises(DownloadError, match="2 files of o/m match Q4_K"):
        choose_files("o/m", files[:2], "Q4_K")


def test_a_split_model_downloads_every_part(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path, reports = _pull(hub, f"{REPO}:F16", cache)
    assert path.name == "tiny-F16-00001-of-00002.gguf"
    assert path.with_name("tiny-F16-00002-of-00002.gguf").read_bytes() == bytes(120_000)
    assert reports.seen[-1].done == reports.seen[-1].total == 270_000
    assert {r.part for r in reports.seen} == {1, 2}
    (entry,) = find_models(ModelRoots(hf_cache=cache))
    assert len(entry.parts) == 2 and entry.problem is None
    # A hub URL of one part goes through the cache too, and brings the others.
    url = f"{hub.url}/{REPO}/resolve/main/F16/tiny-F16-00001-of-00002.gguf"
    assert _pull(hub, url, tmp_path / "cache2")[0].name == path.name


def test_list_repo_models_gives_sizes(hub: Hub) -> None:
    models = list_repo_models(REPO, endpoint=hub.url)
    assert {m.path: m.size for m in models}["tiny-Q8_0.gguf"] == 200_000
    assert not any("mmproj" in m.path or m.path.endswith(".md") for m in models)


def test_a_dropped_connection_resumes_where_it_stopped(
    hub: Hub, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # huggingface_hub writes in steps of HUB_CHUNK: a resume starts after the last whole one.
    content = _model(3 * HUB_CHUNK, 8)
    hub.files[REPO]["tiny-Q4_K_M.gguf"] = content
    hub.drop_after["tiny-Q4_K_M.gguf"] = HUB_CHUNK + 500_000
    path, _ = _pull(hub, REPO, tmp_path / "cache")
    assert path.read_bytes() == content
    ranges = [r for method, p, r in hub.requests if method == "GET" and p.endswith("Q4_K_M.gguf")]
    assert ranges == [None, f"bytes={HUB_CHUNK}-"]
    assert capfd.readouterr().err == ""  # nothing on stderr, where Textual draws


def test_content_that_does_not_match_its_checksum_is_removed(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    hub.corrupt.add("tiny-Q8_0.gguf")
    with pytest.raises(
        DownloadError, match=r"tiny-Q8_0\.gguf is damaged: its content does not match"
    ):
        _pull(hub, f"{REPO}:Q8_0", cache)
    assert find_models(ModelRoots(hf_cache=cache)) == []
    assert not [p for p in cache.rglob("*") if p.is_file() and "Q8_0" in p.name]
    assert not list(cache.rglob("blobs/*[0-9a-f]"))  # no blob a later pull would trust
    hub.corrupt.clear()
    assert _pull(hub, f"{REPO}:Q8_0", cache)[0].read_bytes() == hub.files[REPO]["tiny-Q8_0.gguf"]


def test_no_network_is_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(DownloadError) as raised:
        pull(REPO, Reports(), threading.Event(), cache_dir=tmp_path, endpoint=closed)
    assert str(raised.value) == (
        f"Cannot reach {closed}: check the network connection, then try again."
    )
    assert time.monotonic() - started < 30


def test_unknown_repo_is_one_sentence(hub: Hub, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match=r"There is no model repo nobody/nothing on http"):
        _pull(hub, "nobody/nothing", tmp_path / "cache")
    with pytest.raises(DownloadError, match="is not a model to download"):
        _pull(hub, "just-a-name", tmp_path / "cache")
    with pytest.raises(DownloadError, match=r"does not name a \.gguf file"):
        _pull(hub, "https://example.com/model.bin", tmp_path / "cache")


def test_cancel_stops_at_once_and_the_next_pull_resumes(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    content = _model(5 * MiB, 9)
    hub.files[REPO]["tiny-Q4_K_M.gguf"] = content
    hub.delay_s = 0.02  # 64 KB every 20 ms: the file takes about 2 s
    cancel = threading.Event()

    def cancel_after_first_report(report: DownloadProgress) -> None:
        if report.done > 0:
            cancel.set()

    started = time.monotonic()
    with pytest.raises(DownloadCancelled, match=r"^The download was cancelled\.$"):
        pull(REPO, cancel_after_first_report, cancel, cache_dir=cache, endpoint=hub.url)
    assert time.monotonic() - started < 2
    # The transfer's thread stops at its next step and lets go of the lock.
    wait_for(lambda: not list(cache.rglob("*.lock")))
    assert find_models(ModelRoots(hf_cache=cache)) == []
    (partial,) = cache.rglob("*.incomplete")
    assert partial.name == f"{sha256(content).hexdigest()}.incomplete"
    kept = partial.stat().st_size
    assert 0 < kept < len(content)
    hub.delay_s = 0.0
    hub.requests.clear()
    path, _ = _pull(hub, REPO, cache)
    assert path.read_bytes() == content
    assert _ranges(hub, "Q4_K_M.gguf") == [f"bytes={kept}-"]
    assert _leftovers(cache) == []


def test_progress_reports_speed_and_time_left(hub: Hub, tmp_path: Path) -> None:
    hub.delay_s = 0.002
    _, reports = _pull(hub, f"{REPO}:Q4_K_S", tmp_path / "cache")
    moving = [r for r in reports.seen if 0 < r.done < r.total]
    assert moving, reports.seen
    assert all(r.speed > 0 and r.seconds_left is not None for r in moving[1:])
    assert [r.done for r in reports.seen] == sorted(r.done for r in reports.seen)


def test_a_plain_url_lands_in_the_models_folder_whole(hub: Hub, tmp_path: Path) -> None:
    hub.files["plain"] = {"model-Q5_K_M.gguf": _model(3 * MiB, 7)}
    models = tmp_path / "models"
    url = f"{hub.url}/plain/model-Q5_K_M.gguf"
    # Interrupted: the partial file is not where kvchat looks for models.
    cancel = threading.Event()
    hub.delay_s = 0.01

    def stop(report: DownloadProgress) -> None:
        if report.done:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        pull(url, stop, cancel, models_dir=models, endpoint=hub.url)
    assert find_models(ModelRoots(models_dir=models)) == []
    hub.delay_s = 0.0
    assert (models / "model-Q5_K_M.gguf.incomplete").exists()
    path = pull(url, Reports(), threading.Event(), models_dir=models, endpoint=hub.url)
    assert path == models / "model-Q5_K_M.gguf"
    assert path.read_bytes() == hub.files["plain"]["model-Q5_K_M.gguf"]
    assert not (models / "model-Q5_K_M.gguf.incomplete").exists()
    ranges = [r for method, p, r in hub.requests if method == "GET" and p.startswith("/plain/")]
    assert ranges[0] is None and ranges[-1] is not None  # the second pull resumed
    assert ranges[-1] != "bytes=0-"
