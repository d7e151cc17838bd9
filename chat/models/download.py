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
for it. The spec and the choice of files are in `hub_spec` (no network), the
progress reports and the cancel in `download_progress`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

from chat import paths
from chat.models.download_progress import (
    DownloadProgress,
    Meter,
    ProgressCallback,
    cancellable,
)
from chat.models.hub_spec import (
    DEFAULT_ENDPOINT,
    DEFAULT_QUANT,
    DownloadCancelled,
    DownloadError,
    RemoteFile,
    Source,
    checked_commit,
    checked_file_name,
    checked_hash,
    checked_revision,
    choose_files,
    is_model_name,
    parse_spec,
    refused,
    with_split_parts,
)
from chat.safe_files import UnsafeFileError, inside, is_plain_name
from chat.sanitize import sanitize_line
from chat.whole_files import replace_whole

__all__ = [
    "DEFAULT_QUANT",
    "HUB_CHUNK",
    "DownloadCancelled",
    "DownloadError",
    "DownloadProgress",
    "ProgressCallback",
    "RemoteFile",
    "choose_files",
    "list_repo_models",
    "parse_spec",
    "pull",
]

if TYPE_CHECKING:
    from huggingface_hub.hf_api import ModelInfo

_HASH_CHUNK = 1 << 22
HUB_CHUNK = 1 << 20
"""Bytes huggingface_hub reads per step (its default is 10 MiB). Its progress
calls, our chance to cancel and the point a dropped download resumes from
all come once per step: at 1 MiB they come ten times as often."""


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
        return cancellable(lambda: _pull_url(url, target, progress, cancel), cancel)
    assert source.repo is not None
    repo = source.repo
    return cancellable(
        lambda: _pull_repo(source, repo, progress, cancel, cache_dir, endpoint, token), cancel
    )


def list_repo_models(
    repo: str, endpoint: str | None = None, token: str | None = None, revision: str = "main"
) -> list[RemoteFile]:
    """The GGUF files of a repo, with their sizes (for a picker)."""
    _, files = _repo_files(repo, revision, endpoint, token)
    return [f for f in files if is_model_name(f.path)]


# -- from the hub --------------------------------------------------------------


def _repo_files(
    repo: str, revision: str, endpoint: str | None, token: str | None
) -> tuple[str, list[RemoteFile]]:
    """The commit `revision` points at, and the repo's files there. Every name
    the hub answers is checked: a bad one refuses the whole answer."""
    from huggingface_hub import HfApi

    checked_revision(revision, repo)
    with _explained(repo, endpoint):
        info: ModelInfo = HfApi(endpoint=endpoint, token=token).model_info(
            repo, revision=revision, files_metadata=True
        )
    files = [
        RemoteFile(
            path=checked_file_name(str(sibling.rfilename), repo),
            size=max(int(sibling.size or (sibling.lfs.size if sibling.lfs else 0)), 0),
            sha256=checked_hash(
                str(sibling.lfs.sha256) if sibling.lfs else None, repo, "the SHA-256"
            ),
        )
        for sibling in info.siblings or []
    ]
    commit = str(info.sha) if info.sha else revision
    return checked_commit(commit, repo), files


def _pull_repo(
    source: Source,
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
        chosen = with_split_parts(repo, source.filename, files)
    else:
        chosen = choose_files(repo, files, source.quant)
    meter = Meter(progress, cancel, total=sum(f.size for f in chosen), parts=len(chosen))
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
        replace_whole(ref, self.commit)


def _fetch_file(
    where: _CacheRepo, file: RemoteFile, meter: Meter, endpoint: str | None, token: str | None
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
        etag = checked_hash(answer.etag, repo, "the ETag the server sent")
        if answer.commit_hash is not None and answer.commit_hash != where.commit:
            raise refused("the commit the server named", answer.commit_hash, repo)
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
    meter: Meter,
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


def _verify(partial: Path, file: RemoteFile, meter: Meter) -> None:
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
        raise refused("the file name", name, None)
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
                meter = Meter(progress, cancel, total=0, parts=1)
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
