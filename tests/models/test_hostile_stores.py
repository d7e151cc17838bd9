"""Model stores and mirrors that lie: names that climb out of their folder,
huge manifests, link loops, truncated files, a download killed halfway.

Each store sits in a box whose outside holds trap files (a GGUF that would be
listed, a secret that would be read): a test fails if a trap is listed, read
or written, or if anything is written outside the cache. The real CLI also
runs under strace, when it is installed, and every file it opens, creates,
renames or removes is checked."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

import pytest

from chat.models.catalog import ModelRoots, find_models
from chat.models.download import DownloadError, pull
from chat.models.table import model_rows
from tests.models.gguf_files import llama_fields, write_gguf
from tests.models.hub_mirror import COMMIT, Hub, running_hub, wait_for
from tests.models.test_download import REPO, _model

ROOT = Path(__file__).resolve().parents[2]
STRACE = shutil.which("strace")
GOOD = "a" * 64


# -- the box: a store inside, traps outside -------------------------------------


@dataclass
class Box:
    root: Path
    traps: list[Path]

    def outside_files(self, *inside: Path) -> dict[str, bytes]:
        """Every file in the box but those under `inside`, with its content."""
        found = {}
        for path in sorted(self.root.rglob("*")):
            if any(path == folder or folder in path.parents for folder in inside):
                continue
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(self.root))] = path.read_bytes()
        return found


@pytest.fixture
def box(tmp_path: Path) -> Box:
    root = tmp_path / "box"
    trap_model = write_gguf(root / "trap" / "outside-model.gguf")
    secret = root / "trap" / "passwd"
    secret.write_text("root:x:0:0:trap\n")
    (root / "trap" / f"sha256-{GOOD}").write_bytes(trap_model.read_bytes())
    return Box(root, [trap_model, secret, root / "trap" / f"sha256-{GOOD}"])


def _manifest(store: Path, name: str, tag: str, digest: object) -> Path:
    path = store / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": digest}]
    path.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return path


def _hostile_ollama(box: Box) -> Path:
    """An Ollama store: one good model, and manifests whose digests point at
    the traps every way a path can."""
    store = box.root / "ollama"
    write_gguf(store / "blobs" / f"sha256-{'b' * 64}")
    _manifest(store, "good", "latest", f"sha256:{'b' * 64}")
    secret, trap_model = box.traps[1], box.traps[0]
    _manifest(store, "absolute", "latest", str(secret))
    _manifest(store, "absolute2", "latest", f"sha256:{trap_model}")
    _manifest(store, "climb", "latest", "sha256:../../trap/passwd")
    _manifest(store, "climb2", "latest", f"../trap/sha256-{GOOD}")
    _manifest(store, "number", "latest", 7)
    # A valid digest whose blob is a link out of the store.
    (store / "blobs" / f"sha256-{'c' * 64}").symlink_to(trap_model)
    _manifest(store, "linked", "latest", f"sha256:{'c' * 64}")
    # A manifest of 8 MB: a real one is a few hundred bytes.
    huge = _manifest(store, "huge", "latest", f"sha256:{'b' * 64}")
    huge.write_text(json.dumps({"layers": [], "padding": "x" * (8 << 20)}))
    # A manifest that is a FIFO: opening it must not wait for a writer.
    fifo = store / "manifests" / "registry.ollama.ai" / "library" / "fifo" / "latest"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    # A manifest straight in manifests/ (no model/tag folders).
    (store / "manifests" / "stray").write_text("{}")
    return store


def test_a_hostile_ollama_store_lists_only_its_own_model(box: Box) -> None:
    store = _hostile_ollama(box)
    tracemalloc.start()
    started = time.monotonic()
    found = find_models(ModelRoots(ollama=(store,)))
    elapsed = time.monotonic() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [(e.name, e.path) for e in found] == [
        ("good:latest", store / "blobs" / f"sha256-{'b' * 64}")
    ]
    assert peak < 4 << 20, "the 8 MB manifest was read"
    assert elapsed < 5


def test_hub_snapshot_links_that_leave_their_repo_are_not_listed(box: Box) -> None:
    """huggingface_hub links a snapshot's files to its repo's `blobs/`: a link
    to a GGUF elsewhere (or to a device) is a stranger's, and is not listed."""
    cache = box.root / "hub"
    repo = cache / "models--org--repo"
    write_gguf(repo / "blobs" / "good")
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "good.gguf").symlink_to("../../blobs/good")
    (snapshot / "outside.gguf").symlink_to(box.traps[0])
    (snapshot / "climb.gguf").symlink_to("../../../../trap/outside-model.gguf")
    (snapshot / "zero.gguf").symlink_to("/dev/zero")
    found = find_models(ModelRoots(hf_cache=cache))
    assert [(e.name, e.path) for e in found] == [("org/repo/good.gguf", snapshot / "good.gguf")]


def test_two_links_to_dot_end_the_walk_with_a_sane_listing(tmp_path: Path) -> None:
    models = tmp_path / "models"
    write_gguf(models / "mine.gguf")
    write_gguf(models / "sub" / "deeper.gguf")
    (models / "a").symlink_to(".")
    (models / "b").symlink_to(".")
    (models / "sub" / "up").symlink_to("..")
    hf = tmp_path / "hf" / "models--org--repo" / "snapshots" / COMMIT
    write_gguf(hf / "m.gguf")
    (hf / "loop").symlink_to(".")
    started = time.monotonic()
    found = find_models(ModelRoots(models_dir=models, hf_cache=tmp_path / "hf"))
    assert time.monotonic() - started < 5
    assert [e.name for e in found] == ["mine.gguf", "sub/deeper.gguf", "org/repo/m.gguf"]


def test_a_truncated_gguf_is_listed_as_not_usable_with_the_reason(tmp_path: Path) -> None:
    models = tmp_path / "models"
    tensors = {"token_embd.weight": (256, 64), "output.weight": (256, 64)}
    whole = write_gguf(models / "whole.gguf", llama_fields(), tensors)
    cut = models / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size - 1000])
    rows = {
        row.entry.name: row
        for row in model_rows(entries=find_models(ModelRoots(models_dir=models)))
    }
    assert rows["whole.gguf"].problem is None
    problem = rows["cut.gguf"].problem
    assert problem is not None and problem.startswith("The model file is cut short: ")
    assert (
        f"holds {cut.stat().st_size:,} bytes and its header describes {whole.stat().st_size:,}"
        in problem
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"llama.context_length": float("inf")}, None),  # taken as not given
        ({"llama.block_count": float("nan")}, None),
        ({"llama.attention.head_count_kv": [float("inf")] * 4}, None),
        ({"llama.attention.head_count": float("inf")}, "gives no attention sizes"),
        ({"llama.attention.head_count": None}, "gives no attention sizes"),
        ({"llama.block_count": 2**64 - 1}, "18,446,744,073,709,551,615 layers"),
    ],
    ids=["inf-context", "nan-layers", "inf-kv-heads", "inf-heads", "no-heads", "2**64-layers"],
)
def test_a_gguf_whose_header_makes_no_sense_is_one_row_of_the_list(
    tmp_path: Path, fields: dict[str, object], problem: str | None
) -> None:
    """A float where a count goes was a traceback (int() of Infinity or NaN),
    2**64 layers a list no memory holds, and a model with no attention sizes
    took the whole list with it (`chat --list-models` printed only that)."""
    models = tmp_path / "models"
    write_gguf(models / "good.gguf")
    write_gguf(models / "odd.gguf", llama_fields(**fields))
    rows = {
        row.entry.name: row
        for row in model_rows(entries=find_models(ModelRoots(models_dir=models)))
    }
    assert rows["good.gguf"].problem is None
    if problem is None:
        assert rows["odd.gguf"].problem is None
    else:
        assert problem in (rows["odd.gguf"].problem or "")


# -- a hostile mirror -------------------------------------------------------------


@pytest.fixture(autouse=True)
def hub_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture
def hub() -> Iterator[Hub]:
    files = {"tiny-Q4_K_M.gguf": _model(300_000, 1)}
    with running_hub(Hub(files={REPO: files})) as running:
        yield running


OUTSIDE = "../../../../outside"
HOSTILE = {
    "commit-path": (lambda h: setattr(h, "commit", OUTSIDE), "the commit the server named"),
    "commit-absolute": (lambda h: setattr(h, "commit", "/tmp/kvchat-outside"), "the commit"),
    "etag-path": (
        lambda h: h.etags.update({"tiny-Q4_K_M.gguf": OUTSIDE}),
        "the ETag the server sent",
    ),
    "etag-other-blob": (
        lambda h: h.etags.update({"tiny-Q4_K_M.gguf": "f" * 64}),
        "names another file than its listing",
    ),
    "file-climbs": (
        lambda h: h.files[REPO].update({"../../../escape-Q4_K_M.gguf": _model(9000, 2)}),
        "the file name",
    ),
    "file-absolute": (
        lambda h: h.files[REPO].update({"/tmp/kvchat-abs-Q4_K_M.gguf": _model(9000, 2)}),
        "the file name",
    ),
}


@pytest.mark.parametrize("answer", sorted(HOSTILE))
def test_a_hostile_mirror_is_refused_in_one_sentence_before_anything_is_written(
    hub: Hub, box: Box, answer: str
) -> None:
    make_hostile, said = HOSTILE[answer]
    make_hostile(hub)
    cache = box.root / "cache"
    before = box.outside_files(cache)
    with pytest.raises(DownloadError) as raised:
        pull(REPO, lambda _: None, threading.Event(), cache_dir=cache, endpoint=hub.url)
    message = str(raised.value)
    assert said in message and message.count(". ") == 0 and "\n" not in message, message
    assert box.outside_files(cache) == before
    # Refused before any byte of a model was asked for.
    assert not [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert not list(cache.rglob("*.gguf"))
    assert not [p for p in cache.rglob("*") if p.name.endswith((".incomplete", ".lock"))]


@pytest.mark.parametrize(
    "spec",
    [
        "{url}/org/Tiny-GGUF/resolve/..%2F..%2Fx/tiny-Q4_K_M.gguf",
        "{url}/org/Tiny-GGUF/resolve/main/..%2F..%2F..%2Fescape.gguf",
        "org/..:Q4_K_M",
    ],
    ids=["revision", "file", "repo"],
)
def test_a_spec_that_names_a_path_is_refused(hub: Hub, box: Box, spec: str) -> None:
    cache, models = box.root / "cache", box.root / "models"
    before = box.outside_files(cache, models)
    with pytest.raises(DownloadError, match=r"(Refused|is not a model to download)"):
        pull(
            spec.format(url=hub.url),
            lambda _: None,
            threading.Event(),
            cache_dir=cache,
            models_dir=models,
            endpoint=hub.url,
        )
    assert box.outside_files(cache, models) == before
    assert not [r for r in hub.requests if r[0] == "GET"]


# -- the real CLI, watched -----------------------------------------------------------


@dataclass
class Watched:
    code: int
    stdout: str
    stderr: str
    opened: list[str]
    """Files opened for reading."""
    written: list[str]
    """Files opened for writing, created, renamed (both names), removed, linked."""


_CALL = re.compile(r"^\d+\s+(\w+)\((.*)\)\s+=\s+(-?\d+)")
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")


def _parse_strace(log: Path, cwd: Path) -> tuple[list[str], list[str]]:
    opened: list[str] = []
    written: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        match = _CALL.match(line)
        if match is None:
            continue
        call, args, result = match[1], match[2], int(match[3])
        names = [os.path.join(cwd, n) for n in re.findall(r'"((?:[^"\\]|\\.)*)"', args)]
        if call.startswith("symlink"):
            names = names[-1:]  # the first string is what the link says, not a path used
        if call in ("open", "openat"):
            if any(flag in args for flag in _WRITE_FLAGS):
                written += names
            elif result >= 0:
                opened += names
        elif result >= 0 or call in ("creat",):
            written += names
    return opened, written


def run_cli(args: list[str], env: dict[str, str], watch: Path | None = None) -> Watched:
    """`python -m chat ARGS` from the checkout, under strace when `watch`
    names a log file (and strace is installed)."""
    command = [sys.executable, "-m", "chat", *args]
    if watch is not None:
        assert STRACE is not None
        calls = ",".join(
            f"{call}{suffix}"
            for call in ("open", "rename", "unlink", "mkdir", "symlink", "link")
            for suffix in ("", "at")
        )
        calls += ",creat,renameat2"
        command = [STRACE, "-f", "-qq", "-e", f"trace={calls}", "-o", str(watch), *command]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    opened, written = _parse_strace(watch, ROOT) if watch is not None else ([], [])
    return Watched(done.returncode, done.stdout, done.stderr, opened, written)


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("KVCHAT_", "HF_", "OLLAMA", "LLAMA_CACHE"))
    }
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
        KVCHAT_CONFIG_DIR=str(tmp_path / "config"),
        KVCHAT_DATA_DIR=str(tmp_path / "data"),
        KVCHAT_STATE_DIR=str(tmp_path / "state"),
        KVCHAT_CACHE_DIR=str(tmp_path / "kv-cache"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_CACHE=str(tmp_path / "hub-empty"),
        LLAMA_CACHE=str(tmp_path / "llama-empty"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(more)
    return env


@pytest.fixture(params=["box", "strace"])
def watch(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    """None: the box checks only; else the strace log to write, and the
    process's file calls are checked too."""
    if request.param == "box":
        return None
    if STRACE is None:
        pytest.skip(
            "strace is not installed (apt-get install -y strace): the [box] run of "
            "this test made the same checks on the files, without watching the calls"
        )
    return tmp_path / "trace"


def _allowed_write(path: str, *folders: Path) -> bool:
    real = os.path.realpath(path)
    return real.startswith("/dev/") or any(
        real == str(folder) or real.startswith(f"{folder}/") for folder in folders
    )


def test_list_models_over_hostile_stores_reads_no_trap(
    box: Box, tmp_path: Path, watch: Path | None
) -> None:
    """`chat --list-models` with a hostile Ollama store, a models folder with
    two links to `.`, and a truncated GGUF: quick, sane, no trap touched."""
    store = _hostile_ollama(box)
    models = tmp_path / "data" / "models"
    write_gguf(models / "mine.gguf")
    (models / "a").symlink_to(".")
    (models / "b").symlink_to(".")
    tensors = {"token_embd.weight": (256, 64)}
    whole = write_gguf(tmp_path / "whole.gguf", llama_fields(), tensors).read_bytes()
    (models / "cut.gguf").write_bytes(whole[:-100])
    before = box.outside_files(store)
    started = time.monotonic()
    watched = run_cli(["--list-models"], _env(tmp_path, OLLAMA_MODELS=str(store)), watch)
    assert time.monotonic() - started < 60
    assert watched.code == 0, watched.stderr
    assert "Traceback" not in watched.stderr
    listed = [
        line.split()[0]
        for line in watched.stdout.splitlines()[1:]
        if line and not line.startswith(" ")
    ]
    assert "good:latest" in listed and listed.count("mine.gguf") == 1, watched.stdout
    assert not [
        name
        for name in listed
        if name.split(":")[0]
        in ("absolute", "absolute2", "climb", "climb2", "linked", "huge", "number")
    ]
    assert "cannot be used: The model file is cut short" in watched.stdout
    for trap in box.traps:
        assert str(trap) not in watched.stdout
    assert box.outside_files(store) == before
    if watch is None:
        return
    good = store / "blobs" / f"sha256-{'b' * 64}"
    assert str(good) in watched.opened  # the watch sees what the process opens
    for trap in box.traps:
        assert not [p for p in watched.opened if os.path.realpath(p) == str(trap.resolve())], trap
    assert not [p for p in watched.written if "/box/" in p], watched.written
    assert not [p for p in watched.opened if p.endswith("/etc/passwd")]


def test_pull_from_a_hostile_mirror_exits_2_and_writes_nothing_outside_the_cache(
    hub: Hub, box: Box, tmp_path: Path, watch: Path | None
) -> None:
    hub.commit = OUTSIDE
    cache = box.root / "cache"
    before = box.outside_files(cache)
    env = _env(tmp_path, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    watched = run_cli(["--pull", REPO], env, watch)
    assert watched.code == 2
    assert watched.stdout == ""
    assert watched.stderr.startswith("chat: Refused the commit the server named ")
    assert watched.stderr.count("\n") == 1 and "Traceback" not in watched.stderr
    assert box.outside_files(cache) == before
    if watch is not None:
        stray = [p for p in watched.written if not _allowed_write(p, cache, tmp_path / "hf-home")]
        assert stray == [], stray
        assert not [p for p in watched.written if "outside" in p]


def test_pull_writes_only_inside_the_cache(hub: Hub, tmp_path: Path, watch: Path | None) -> None:
    cache = tmp_path / "cache"
    env = _env(tmp_path, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    watched = run_cli(["--pull", REPO], env, watch)
    assert watched.code == 0, watched.stderr
    path = Path(watched.stdout.strip())
    assert path.read_bytes() == hub.files[REPO]["tiny-Q4_K_M.gguf"]
    assert path == cache / "models--org--Tiny-GGUF" / "snapshots" / COMMIT / "tiny-Q4_K_M.gguf"
    assert not [p for p in cache.rglob("*") if p.name.endswith((".incomplete", ".lock"))]
    if watch is not None:
        stray = [p for p in watched.written if not _allowed_write(p, cache, tmp_path / "hf-home")]
        assert stray == [], stray
        assert any(p.endswith(".incomplete") for p in watched.written)  # the watch sees writes


def test_a_killed_download_resumes_from_where_its_partial_file_ends(
    hub: Hub, tmp_path: Path
) -> None:
    content = _model(6 << 20, 3)
    hub.files[REPO]["tiny-Q4_K_M.gguf"] = content
    hub.delay_s = 0.01  # 64 KB every 10 ms: the file takes about a second
    cache = tmp_path / "cache"
    partial = (
        cache / "models--org--Tiny-GGUF" / "blobs" / f"{sha256(content).hexdigest()}.incomplete"
    )
    env = _env(tmp_path, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    first = subprocess.Popen(
        [sys.executable, "-m", "chat", "--pull", REPO],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: partial.exists() and partial.stat().st_size >= 2 << 20, timeout=30)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    kept = partial.stat().st_size
    assert 0 < kept < len(content)
    hub.delay_s = 0.0
    hub.requests.clear()
    watched = run_cli(["--pull", REPO], env)
    assert watched.code == 0, watched.stderr
    assert Path(watched.stdout.strip()).read_bytes() == content
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith("Q4_K_M.gguf")]
    assert ranges == [f"bytes={kept}-"]
    assert not [p.name for p in cache.rglob("*") if p.name.endswith((".incomplete", ".lock"))]


def test_leftovers_of_an_earlier_killed_download_are_removed(hub: Hub, tmp_path: Path) -> None:
    """huggingface_hub's own partial files have a random name that no later
    try finds: once the blob is complete, they go."""
    cache = tmp_path / "cache"
    content = hub.files[REPO]["tiny-Q4_K_M.gguf"]
    blobs = cache / "models--org--Tiny-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    stale = blobs / f"{sha256(content).hexdigest()}.1a2b3c4d.incomplete"
    stale.write_bytes(content[:1000])
    pull(REPO, lambda _: None, threading.Event(), cache_dir=cache, endpoint=hub.url)
    assert not stale.exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_model_path_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    from chat.errors import ModelError
    from chat.models.files import check_gguf
    from chat.models.metadata import read_metadata

    path = tmp_path / "model.gguf"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer
    else:
        path.symlink_to("/dev/zero")  # reading it would never end
    for check in (check_gguf, read_metadata):
        with pytest.raises(ModelError, match=r"is a (pipe \(FIFO\)|device): only regular files"):
            check(path)  # type: ignore[operator]


def test_list_models_shows_store_names_without_their_escapes(tmp_path: Path) -> None:
    store = tmp_path / "ollama"
    write_gguf(store / "blobs" / f"sha256-{'d' * 64}")
    _manifest(store, "evil\x1b]0;pwned\x07", "latest\x1b[2J", f"sha256:{'d' * 64}")
    watched = run_cli(["--list-models"], _env(tmp_path, OLLAMA_MODELS=str(store)))
    assert watched.code == 0, watched.stderr
    assert "evil" in watched.stdout
    assert "\x1b" not in watched.stdout and "\x07" not in watched.stdout
