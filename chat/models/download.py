"""Getting a GGUF model from Hugging Face (or any https URL).

`pull("org/repo:Q4_K_M", progress, cancel)` picks one model in the repo, the
quantization asked for or else Q4_K_M (llama.cpp's default for `-hf`), and
downloads it, every part of a split model, into the Hugging Face hub cache,
where `chat.models.catalog` finds it and other tools share it. huggingface_hub
does the transfer: the token from its usual place (`HF_TOKEN`, `hf auth
login`), `HF_ENDPOINT`, retries that resume a dropped connection with a Range
request, a size check. It does not check the content against the repo's
SHA-256 (the ETag of an LFS file): `pull` does, and removes a file that does
not match.

Nothing half-written is left where kvchat loads models: huggingface_hub writes
to `blobs/<sha256>.<random>.incomplete` and links the snapshot only when the
file is complete; a download from another URL goes to `<name>.gguf.incomplete`
in kvchat's models folder (kept for the next try to resume) and is renamed at
the end.

huggingface_hub is imported on the first download: kvchat's start does not pay
for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import unquote, urlparse

from chat import paths
from chat.errors import ModelError
from chat.models.metadata import SPLIT_NAME
from chat.models.sizes import human_bytes
from chat.safe_files import UnsafeFileError, inside, is_plain_name
from chat.sanitize import sanitize_line

if TYPE_CHECKING:
    from huggingface_hub.hf_api import ModelInfo

DEFAULT_QUANT = "Q4_K_M"
DEFAULT_ENDPOINT = "https://huggingface.co"
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REVISION = re.compile(r"^[\w][\w.-]*$")
"""A branch or tag name without folder parts (`main`, `v1.0`)."""
_REPORT_EVERY_S = 0.1
"""At most ten progress reports a second: a UI redraws no faster."""
_SPEED_WINDOW_S = 5.0
"""Speed is measured over the last seconds, so that it follows the network."""
_HASH_CHUNK = 1 << 22
HUB_CHUNK = 1 << 20
"""Bytes huggingface_hub reads per step (its default is 10 MiB). Its progress
calls, our chance to cancel and the point a dropped download resumes from
all come once per step: at 1 MiB they come ten times as often."""

T = TypeVar("T")


class DownloadError(ModelError):
    """A model could not be downloaded; the message says why and what to do."""


class DownloadCancelled(DownloadError):
    """The user stopped the download."""


@dataclass(frozen=True)
class RemoteFile:
    """A file in a Hugging Face repo."""

    path: str
    size: int
    sha256: str | None = None
    """The LFS object id (the file's SHA-256), for files stored with LFS."""


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report. Byte counts cover every file of the model."""

    file: str
    """The file being transferred (or checked)."""
    part: int
    """Which file, from 1, of `parts` (a split model has several)."""
    parts: int
    done: int
    total: int
    speed: float
    """Bytes per second over the last few seconds."""
    seconds_left: float | None
    """At that speed; None while the speed is not known yet."""
    verifying: bool = False
    """True while the finished file is checked against the repo's SHA-256."""


ProgressCallback = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class _Source:
    """What a spec names: a repo (with a quantization or a file in it) or a plain URL."""

    repo: str | None = None
    revision: str = "main"
    quant: str | None = None
    filename: str | None = None
    url: str | None = None


def parse_spec(spec: str, endpoint: str | None = None) -> _Source:
    """`org/repo`, `org/repo:QUANT`, or an https URL of a `.gguf` file. A URL of
    a file on the hub (`.../org/repo/resolve/<revision>/<file>`) goes through
    the hub cache like a repo."""
    spec = spec.strip()
    if spec.startswith(("https://", "http://")):
        url = urlparse(spec)
        if not url.path.lower().endswith(".gguf"):
            raise DownloadError(f"{spec} does not name a .gguf file: kvchat runs GGUF models.")
        hub = urlparse(endpoint or DEFAULT_ENDPOINT)
        pieces = unquote(url.path).strip("/").split("/")
        if url.netloc == hub.netloc and len(pieces) >= 5 and pieces[2] in ("resolve", "blob"):
            repo = _checked_repo("/".join(pieces[:2]), spec)
            return _Source(
                repo=repo,
                revision=_checked_revision(pieces[3], repo),
                filename=_checked_file_name("/".join(pieces[4:]), repo),
            )
        return _Source(url=spec)
    repo, _, quant = spec.partition(":")
    return _Source(repo=_checked_repo(repo, spec), quant=quant.strip() or None)


def _checked_repo(repo: str, spec: str) -> str:
    if not _REPO.match(repo) or ".." in repo or "--" in repo:
        raise DownloadError(
            f"{spec!r} is not a model to download: give a Hugging Face repo "
            "(org/name, or org/name:Q4_K_M for one quantization) or an https URL of a .gguf file."
        )
    return repo


# -- names from outside --------------------------------------------------------
# Checked before they reach the file system or huggingface_hub: a hub (or a
# mirror, or a URL typed in) may answer anything.


def _refused(what: str, value: str, repo: str | None) -> DownloadError:
    where = f" for {repo}" if repo else ""
    return DownloadError(
        f"Refused {what} {sanitize_line(value)[:120]!r}{where}: it is not a valid name "
        "and could lead outside the download cache."
    )


def _checked_revision(revision: str, repo: str | None) -> str:
    """A commit hash or a plain branch or tag name."""
    if not (_COMMIT.match(revision) or (_REVISION.match(revision) and ".." not in revision)):
        raise _refused("the revision", revision, repo)
    return revision


def _checked_commit(commit: str, repo: str | None) -> str:
    """What the hub says a revision points at: a commit hash, nothing else."""
    if not _COMMIT.match(commit):
        raise _refused("the commit the server named", commit, repo)
    return commit


def _checked_file_name(name: str, repo: str | None) -> str:
    """A file in a repo: relative, `/`-separated plain names (no `..`, no
    absolute part, no backslash, no empty part)."""
    parts = name.split("/")
    if not name or not all(is_plain_name(part) for part in parts):
        raise _refused("the file name", name, repo)
    return name


def _checked_hash(value: str | None, repo: str | None, what: str) -> str | None:
    """An LFS SHA-256 (64 hex digits) or a git blob id (40): used as a file name."""
    if value is None:
        return None
    if not (_SHA256.match(value) or _COMMIT.match(value)):
        raise _refused(what, value, repo)
    return value


def pull(
    spec: str,
    progress: ProgressCallback,
    cancel: threading.Event,
    *,
    cache_dir: Path | None = None,
    models_dir: Path | None = None,
    endpoint: str | None = None,
    token: str | None = None,
) -> Path:
    """Download the model `spec` names and return the path to load (the first
    part of a split model). A model already downloaded is not fetched again.

    `progress` is called from a worker thread, at most ten times a second.
    Setting `cancel` stops the download at once (`DownloadCancelled`).
    `cache_dir` (default: the hub cache), `models_dir` (for plain URLs;
    default: kvchat's models folder) and `endpoint` (default: `HF_ENDPOINT`,
    else huggingface.co) are for tests. Raises `DownloadError` with one
    sentence saying what went wrong.
    """
    # Resolved here, not left to huggingface_hub: it builds its file URLs from
    # the endpoint it read at import, which a later HF_ENDPOINT would not change.
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or _hub_endpoint()
    source = parse_spec(spec, endpoint)
    if source.url is not None:
        target = models_dir or paths.models_dir()
        url = source.url
        return _cancellable(lambda: _pull_url(url, target, progress, cancel), cancel)
    assert source.repo is not None
    repo = source.repo
    return _cancellable(
        lambda: _pull_repo(source, repo, progress, cancel, cache_dir, endpoint, token), cancel
    )


def list_repo_models(
    repo: str, endpoint: str | None = None, token: str | None = None, revision: str = "main"
) -> list[RemoteFile]:
    """The GGUF files of a repo, with their sizes (for a picker)."""
    _, files = _repo_files(repo, revision, endpoint, token)
    return [f for f in files if _is_model_name(f.path)]


def choose_files(repo: str, files: Sequence[RemoteFile], quant: str | None) -> list[RemoteFile]:
    """The files of the one model in `files` to download: the quantization
    asked for (matched case-insensitively in the file names), else Q4_K_M, else
    the only model there is. Every part of a split model. Raises
    `DownloadError` listing the models there are when none or several match."""
    models = _group_models([f for f in files if _is_model_name(f.path)])
    if not models:
        raise DownloadError(f"The repo {repo} holds no GGUF model file.")
    wanted = quant or DEFAULT_QUANT
    matching = _matching(models, wanted)
    if len(matching) == 1:
        return matching[0]
    if quant is None and not matching and len(models) == 1:
        return models[0]
    listing = "; ".join(
        f"{parts[0].path} ({human_bytes(sum(p.size for p in parts))})"
        for parts in (matching or models)
    )
    if matching:
        raise DownloadError(
            f"{len(matching)} files of {repo} match {wanted}: {listing}. "
            "Name one more exactly (e.g. org/repo:Q4_K_M)."
        )
    asked = f"No {wanted} file in {repo}" if quant else f"{repo} has no {DEFAULT_QUANT} file"
    raise DownloadError(f"{asked}. It has: {listing}. Pick one with {repo}:QUANT.")


def _matching(models: list[list[RemoteFile]], quant: str) -> list[list[RemoteFile]]:
    """Models whose name contains `quant`; when several do ("Q4_K" is in
    Q4_K_M and Q4_K_S), those where it is a whole word."""
    needle = quant.lower()
    found = [parts for parts in models if needle in parts[0].path.lower()]
    if len(found) > 1:
        word = re.compile(rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9_])")
        exact = [parts for parts in found if word.search(parts[0].path.lower())]
        found = exact or found
    return found


def _is_model_name(path: str) -> bool:
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(".gguf") and "mmproj" not in name


def _group_models(files: list[RemoteFile]) -> list[list[RemoteFile]]:
    """Files grouped by model: the parts of a split model together, in order."""
    groups: dict[str, list[RemoteFile]] = {}
    for file in sorted(files, key=lambda f: f.path):
        folder, _, name = file.path.rpartition("/")
        match = SPLIT_NAME.match(name)
        key = f"{folder}/{match['prefix']}-of-{match['count']}" if match else file.path
        groups.setdefault(key, []).append(file)
    return list(groups.values())


# -- from the hub --------------------------------------------------------------


def _repo_files(
    repo: str, revision: str, endpoint: str | None, token: str | None
) -> tuple[str, list[RemoteFile]]:
    """The commit `revision` points at, and the repo's files there. Every name
    the hub answers is checked: a bad one refuses the whole answer."""
    from huggingface_hub import HfApi

    _checked_revision(revision, repo)
    with _explained(repo, endpoint):
        info: ModelInfo = HfApi(endpoint=endpoint, token=token).model_info(
            repo, revision=revision, files_metadata=True
        )
    files = [
        RemoteFile(
            path=_checked_file_name(str(sibling.rfilename), repo),
            size=max(int(sibling.size or (sibling.lfs.size if sibling.lfs else 0)), 0),
            sha256=_checked_hash(
                str(sibling.lfs.sha256) if sibling.lfs else None, repo, "the SHA-256"
            ),
        )
        for sibling in info.siblings or []
    ]
    commit = str(info.sha) if info.sha else revision
    return _checked_commit(commit, repo), files


def _pull_repo(
    source: _Source,
    repo: str,
    progress: ProgressCallback,
    cancel: threading.Event,
    cache_dir: Path | None,
    endpoint: str | None,
    token: str | None,
) -> Path:
    commit, files = _repo_files(repo, source.revision, endpoint, token)
    _prepare_hub()
    if source.filename is not None:
        chosen = _with_split_parts(repo, source.filename, files)
    else:
        chosen = choose_files(repo, files, source.quant)
    meter = _Meter(progress, cancel, total=sum(f.size for f in chosen), parts=len(chosen))
    cache = cache_dir or _hub_cache()
    where = _CacheRepo(cache, repo, commit)
    downloaded: list[Path] = []
    for number, file in enumerate(chosen, start=1):
        meter.start_file(file.path, number)
        try:
            path = _fetch_file(where, file, meter, endpoint, token)
            if source.revision != commit:
                where.remember(source.revision)
        except UnsafeFileError as error:
            raise DownloadError(f"Refused to download {file.path}: {error}") from error
        except OSError as error:
            raise DownloadError(
                f"Cannot save {file.path}: {paths.folder_problem(cache, error)}."
            ) from error
        meter.finish_file(file.size)
        downloaded.append(path)
    return downloaded[0]


class _CacheRepo:
    """One repo's folder in the hub cache, laid out as huggingface_hub lays it
    out (`blobs/<hash>`, `snapshots/<commit>/<file>` linking to the blob,
    `refs/<branch>` holding a commit), every path checked to stay inside."""

    def __init__(self, cache: Path, repo: str, commit: str) -> None:
        self.cache = cache
        self.folder_name = f"models--{repo.replace('/', '--')}"
        self.storage = inside(cache, self.folder_name, what="repo folder")
        self.commit = commit

    def blob(self, name: str) -> Path:
        return inside(self.storage, "blobs", name, what="blob")

    def lock(self, name: str) -> Path:
        return inside(self.cache, ".locks", self.folder_name, f"{name}.lock", what="lock file")

    def pointer(self, file: str) -> Path:
        """`snapshots/<commit>/<file>`: the folder is resolved inside the
        storage, the link itself is not followed (it points at a blob)."""
        *folders, name = file.split("/")
        folder = inside(self.storage, "snapshots", self.commit, *folders, what="snapshot folder")
        return folder / name

    def link(self, pointer: Path, blob: Path) -> None:
        pointer.parent.mkdir(parents=True, exist_ok=True)
        if pointer.is_symlink() or pointer.exists():
            pointer.unlink()
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))

    def remember(self, revision: str) -> None:
        """`refs/<revision>`: which commit a branch or tag named (offline use)."""
        ref = inside(self.storage, "refs", revision, what="ref")
        ref.parent.mkdir(parents=True, exist_ok=True)
        temporary = ref.with_name(f".{ref.name}.kvchat-tmp")
        temporary.write_text(self.commit)
        temporary.replace(ref)


def _fetch_file(
    where: _CacheRepo, file: RemoteFile, meter: _Meter, endpoint: str | None, token: str | None
) -> Path:
    """The file in the cache, downloaded if it is not there yet, resuming a
    partial download left by an earlier try."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import WeakFileLock

    pointer = where.pointer(file.path)
    if pointer.is_file() and (file.sha256 is None or pointer.resolve().name == file.sha256):
        return pointer
    repo = where.folder_name.removeprefix("models--").replace("--", "/")
    url = hf_hub_url(repo, file.path, revision=where.commit, endpoint=endpoint)
    name = file.sha256
    if name is None or not where.blob(name).is_file():
        with _explained(repo, endpoint, file.path):
            answer = get_hf_file_metadata(url, token=token, endpoint=endpoint)
        etag = _checked_hash(answer.etag, repo, "the ETag the server sent")
        if answer.commit_hash is not None and answer.commit_hash != where.commit:
            raise _refused("the commit the server named", answer.commit_hash, repo)
        if etag is None or (file.sha256 is not None and etag != file.sha256):
            raise DownloadError(
                f"The server's answer for {file.path} names another file than its listing "
                "(ETag and SHA-256 differ): refused."
            )
        name = etag
    blob = where.blob(name)
    if not blob.is_file():
        partial = where.blob(f"{name}.incomplete")
        lock = where.lock(name)
        lock.parent.mkdir(parents=True, exist_ok=True)
        blob.parent.mkdir(parents=True, exist_ok=True)
        # Another kvchat (or a cancelled pull's thread, still writing) may hold
        # the partial file: wait for it, then resume where it stopped.
        with WeakFileLock(lock):
            try:
                if not blob.is_file():
                    _download_resuming(url, partial, file, meter, repo, endpoint, token)
                    _verify(partial, file, meter)
                    partial.replace(blob)
                _remove_leftovers(blob)
            finally:
                # Removed while held: a waiter then finds the blob and stops.
                lock.unlink(missing_ok=True)
                _remove_if_empty(lock.parent)
    where.link(pointer, blob)
    return pointer


def _download_resuming(
    url: str,
    partial: Path,
    file: RemoteFile,
    meter: _Meter,
    repo: str,
    endpoint: str | None,
    token: str | None,
) -> None:
    """Append to `partial` from where it ends (a Range request); a partial
    file longer than the file is stale and starts over."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    with partial.open("ab") as out:
        done = out.tell()
        if file.size and done > file.size:
            out.truncate(0)
            done = 0
        with _explained(repo, endpoint, file.path):
            http_get(
                url,
                out,
                resume_size=done,
                headers=build_hf_headers(token=token),
                expected_size=file.size or None,
                displayed_filename=file.path.rsplit("/", 1)[-1],
                tqdm_class=cast(Any, meter.bar_class()),
            )


def _remove_if_empty(folder: Path) -> None:
    with suppress(OSError):  # not empty: another download's lock is there
        folder.rmdir()


def _remove_leftovers(blob: Path) -> None:
    """Partial files of the same blob that huggingface_hub (or an older kvchat
    that let it download) left when killed: `<hash>.<random>.incomplete`."""
    for leftover in blob.parent.glob(f"{blob.name}.*.incomplete"):
        leftover.unlink(missing_ok=True)
    blob.with_name(f"{blob.name}.incomplete").unlink(missing_ok=True)


def _with_split_parts(repo: str, filename: str, files: list[RemoteFile]) -> list[RemoteFile]:
    """The file a URL names, and the other parts if it is part of a split model."""
    for parts in _group_models(files):
        if any(part.path == filename for part in parts):
            return parts
    raise DownloadError(f"The repo {repo} has no file {filename}.")


def _prepare_hub() -> None:
    """Settings of huggingface_hub for kvchat's process: smaller read steps
    (`HUB_CHUNK`), and its warnings ("Trying to resume download...") kept off
    stderr, where Textual draws. Its log records still reach the logging tree;
    the NullHandler keeps Python's last-resort handler from printing them."""
    import logging

    from huggingface_hub import constants

    constants.DOWNLOAD_CHUNK_SIZE = HUB_CHUNK

    hub_logger = logging.getLogger("huggingface_hub")
    for handler in list(hub_logger.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            hub_logger.removeHandler(handler)
    if not hub_logger.handlers:
        hub_logger.addHandler(logging.NullHandler())


def _hub_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _verify(partial: Path, file: RemoteFile, meter: _Meter) -> None:
    """Check the downloaded file against the repo's SHA-256 before it becomes
    a blob; remove it if it differs, so that no later try resumes it."""
    if file.sha256 is None:
        return
    digest = hashlib.sha256()
    done = 0
    with partial.open("rb") as data:
        while chunk := data.read(_HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            meter.verified(done)
    if digest.hexdigest() != file.sha256:
        partial.unlink(missing_ok=True)
        raise DownloadError(
            f"The download of {file.path} is damaged: its content does not match the "
            "checksum Hugging Face gives for it. It was removed; try again."
        )


# -- from any URL --------------------------------------------------------------


def _pull_url(
    url: str, models_dir: Path, progress: ProgressCallback, cancel: threading.Event
) -> Path:
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import WeakFileLock

    _prepare_hub()
    name = Path(unquote(urlparse(url).path)).name
    if not is_plain_name(name):
        raise _refused("the file name", name, None)
    try:
        target = inside(models_dir, name, what="model file")
    except UnsafeFileError as error:
        raise DownloadError(f"Refused to download {sanitize_line(url)}: {error}") from error
    if target.exists():
        return target  # downloaded before: never overwritten
    partial = target.with_name(name + ".incomplete")
    lock = target.with_name(name + ".lock")
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
        # A cancelled pull's thread may still be writing the partial file: the
        # next pull of the same URL waits for it, then resumes where it stopped.
        with WeakFileLock(lock):
            try:
                if target.exists():
                    return target
                meter = _Meter(progress, cancel, total=0, parts=1)
                meter.start_file(name, 1)
                with partial.open("ab") as file, _explained(None, url):
                    http_get(
                        url,
                        file,
                        resume_size=file.tell(),
                        tqdm_class=cast(Any, meter.bar_class()),
                        displayed_filename=name,
                    )
                partial.replace(target)
            finally:
                lock.unlink(missing_ok=True)
    except OSError as error:
        raise DownloadError(
            f"Cannot save {name}: {paths.folder_problem(models_dir, error)}."
        ) from error
    return target


# -- progress and cancelling ---------------------------------------------------


class _Meter:
    """Turns huggingface_hub's progress-bar calls into `DownloadProgress`
    reports, and stops the transfer when `cancel` is set: the bar's `update`
    raises, huggingface_hub deletes its temporary file."""

    def __init__(
        self, report: ProgressCallback, cancel: threading.Event, total: int, parts: int
    ) -> None:
        self._report = report
        self._cancel = cancel
        self._total = total
        self._parts = parts
        self._finished = 0  # bytes of the files done
        self._current = 0  # bytes of the file in transfer
        self._file = ""
        self._part = 1
        self._samples: deque[tuple[float, int]] = deque()
        self._last_report = 0.0

    def start_file(self, name: str, part: int) -> None:
        self._file, self._part, self._current = name, part, 0
        self._check_cancel()

    def finish_file(self, size: int) -> None:
        self._finished += size
        self._current = 0
        self._send(force=True)

    def bar_class(self) -> type:
        """A class huggingface_hub can use as `tqdm_class` (it only creates it
        with keyword arguments, calls `update` and uses it as a context manager)."""
        meter = self

        class Bar:
            def __init__(
                self, *args: Any, total: int | None = None, initial: int = 0, **kwargs: Any
            ) -> None:
                meter.began(total, initial)

            def update(self, n: float | None = 1) -> None:
                meter.advanced(int(n or 0))

            def close(self) -> None:
                pass

            def __enter__(self) -> Bar:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

        return Bar

    def began(self, total: int | None, initial: int) -> None:
        if self._total == 0 and total:  # a plain URL: the size comes with the answer
            self._total = total
        self._current = initial
        self._check_cancel()

    def advanced(self, n: int) -> None:
        self._current += n  # negative when a resume was refused and it starts over
        self._check_cancel()
        self._send()

    def verified(self, done: int) -> None:
        self._check_cancel()
        self._send(verifying=done)

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise DownloadCancelled("The download was cancelled.")

    def _send(self, force: bool = False, verifying: int | None = None) -> None:
        now = time.monotonic()
        done = self._finished + self._current
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > _SPEED_WINDOW_S:
            self._samples.popleft()
        if not force and now - self._last_report < _REPORT_EVERY_S:
            return
        self._last_report = now
        first_time, first_done = self._samples[0]
        elapsed = now - first_time
        speed = (done - first_done) / elapsed if elapsed > 0 else 0.0
        total = max(self._total, done)
        left = (total - done) / speed if speed > 0 else None
        self._report(
            DownloadProgress(
                file=self._file,
                part=self._part,
                parts=self._parts,
                done=done if verifying is None else self._finished + verifying,
                total=total,
                speed=speed if verifying is None else 0.0,
                seconds_left=left if verifying is None else None,
                verifying=verifying is not None,
            )
        )


def _cancellable(work: Callable[[], T], cancel: threading.Event) -> T:
    """Run `work` in a daemon thread and return its result, or raise
    `DownloadCancelled` as soon as `cancel` is set, even while the network is
    silent (the transfer itself stops at its next chunk or time-out)."""
    outcome: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name="kvchat-download", daemon=True).start()
    while not done.wait(0.05):
        if cancel.is_set():
            raise DownloadCancelled("The download was cancelled.")
    ok, value = outcome[0]
    if ok:
        return cast(T, value)
    raise value


@contextmanager
def _explained(repo: str | None, where: str | None, file: str | None = None) -> Iterator[None]:
    """Turns huggingface_hub's and the network's exceptions into one sentence
    for the user (`DownloadError`)."""
    try:
        yield
    except DownloadError:
        raise
    except Exception as error:
        message = _sentence(error, repo, where or DEFAULT_ENDPOINT, file)
        if message is None:
            raise
        raise DownloadError(message) from error


def _sentence(error: Exception, repo: str | None, where: str, file: str | None) -> str | None:
    from huggingface_hub import errors

    if isinstance(error, errors.OfflineModeIsEnabled):
        return "Downloads are turned off (HF_HUB_OFFLINE is set): unset it to download models."
    if isinstance(error, errors.GatedRepoError):
        return (
            f"The repo {repo} is gated: accept its terms on its Hugging Face page, then log "
            "in here with `hf auth login` (or set HF_TOKEN)."
        )
    if isinstance(error, errors.RepositoryNotFoundError):
        return (
            f"There is no model repo {repo} on {where} (or it is private: log in with "
            "`hf auth login` or set HF_TOKEN)."
        )
    if isinstance(error, errors.RevisionNotFoundError):
        return f"The repo {repo} has no such revision (branch, tag or commit)."
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return f"The repo {repo} has no file {file}."
    if isinstance(error, errors.HfHubHTTPError):
        status = error.response.status_code if error.response is not None else "an error"
        return f"{where} answered {status} for {file or repo}: try again later."
    network = (errors.LocalEntryNotFoundError, ConnectionError, TimeoutError)
    if isinstance(error, network) or _is_network_error(error):
        return f"Cannot reach {where}: check the network connection, then try again."
    if isinstance(error, OSError) and "Consistency check failed" in str(error):
        return (
            f"The download of {file} stopped short of its size (the connection dropped): try again."
        )
    if isinstance(error, OSError):
        return f"The download failed: {error.strerror or error}."
    return None


def _is_network_error(error: BaseException) -> bool:
    """A transport error of the HTTP client huggingface_hub uses (httpx, or its
    fork httpx2 in huggingface_hub 2.x): named by its class, so that kvchat
    does not depend on which one is installed."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"TransportError", "ConnectError", "TimeoutException", "NetworkError"})


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT or DEFAULT_ENDPOINT).rstrip("/")
