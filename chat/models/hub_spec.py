"""What a model to download is, before anything goes over the network: the
spec the user typed (`org/repo`, `org/repo:QUANT`, an https URL), the names a
hub answers with (checked before they reach the file system), and which files
of a repo make the model to download. No network and no huggingface_hub here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from chat.errors import ModelError
from chat.models.metadata import SPLIT_NAME
from chat.models.sizes import human_bytes
from chat.safe_files import is_plain_name
from chat.sanitize import sanitize_line

DEFAULT_QUANT = "Q4_K_M"
DEFAULT_ENDPOINT = "https://huggingface.co"
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_REVISION = re.compile(r"^[\w][\w.-]*$")
"""A branch or tag name without folder parts (`main`, `v1.0`)."""


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
class Source:
    """What a spec names: a repo (with a quantization or a file in it) or a plain URL."""

    repo: str | None = None
    revision: str = "main"
    quant: str | None = None
    filename: str | None = None
    url: str | None = None


def parse_spec(spec: str, endpoint: str | None = None) -> Source:
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
            repo = checked_repo("/".join(pieces[:2]), spec)
            return Source(
                repo=repo,
                revision=checked_revision(pieces[3], repo),
                filename=checked_file_name("/".join(pieces[4:]), repo),
            )
        return Source(url=spec)
    repo, _, quant = spec.partition(":")
    return Source(repo=checked_repo(repo, spec), quant=quant.strip() or None)


def checked_repo(repo: str, spec: str) -> str:
    if not _REPO.match(repo) or ".." in repo or "--" in repo:
        raise DownloadError(
            f"{spec!r} is not a model to download: give a Hugging Face repo "
            "(org/name, or org/name:Q4_K_M for one quantization) or an https URL of a .gguf file."
        )
    return repo


# -- names from outside --------------------------------------------------------
# Checked before they reach the file system or huggingface_hub: a hub (or a
# mirror, or a URL typed in) may answer anything.


def refused(what: str, value: str, repo: str | None) -> DownloadError:
    where = f" for {repo}" if repo else ""
    return DownloadError(
        f"Refused {what} {sanitize_line(value)[:120]!r}{where}: it is not a valid name "
        "and could lead outside the download cache."
    )


def checked_revision(revision: str, repo: str | None) -> str:
    """A commit hash or a plain branch or tag name."""
    if not (_COMMIT.match(revision) or (_REVISION.match(revision) and ".." not in revision)):
        raise refused("the revision", revision, repo)
    return revision


def checked_commit(commit: str, repo: str | None) -> str:
    """What the hub says a revision points at: a commit hash, nothing else."""
    if not _COMMIT.match(commit):
        raise refused("the commit the server named", commit, repo)
    return commit


def checked_file_name(name: str, repo: str | None) -> str:
    """A file in a repo: relative, `/`-separated plain names (no `..`, no
    absolute part, no backslash, no empty part)."""
    parts = name.split("/")
    if not name or not all(is_plain_name(part) for part in parts):
        raise refused("the file name", name, repo)
    return name


def checked_hash(value: str | None, repo: str | None, what: str) -> str | None:
    """An LFS SHA-256 (64 hex digits) or a git blob id (40): used as a file name."""
    if value is None:
        return None
    if not (_SHA256.match(value) or _COMMIT.match(value)):
        raise refused(what, value, repo)
    return value


def choose_files(repo: str, files: Sequence[RemoteFile], quant: str | None) -> list[RemoteFile]:
    """The files of the one model in `files` to download: the quantization
    asked for (matched case-insensitively in the file names), else Q4_K_M, else
    the only model there is. Every part of a split model. Raises
    `DownloadError` listing the models there are when none or several match."""
    models = group_models([f for f in files if is_model_name(f.path)])
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


def is_model_name(path: str) -> bool:
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(".gguf") and "mmproj" not in name


def group_models(files: list[RemoteFile]) -> list[list[RemoteFile]]:
    """Files grouped by model: the parts of a split model together, in order."""
    groups: dict[str, list[RemoteFile]] = {}
    for file in sorted(files, key=lambda f: f.path):
        folder, _, name = file.path.rpartition("/")
        match = SPLIT_NAME.match(name)
        key = f"{folder}/{match['prefix']}-of-{match['count']}" if match else file.path
        groups.setdefault(key, []).append(file)
    return list(groups.values())


def with_split_parts(repo: str, filename: str, files: list[RemoteFile]) -> list[RemoteFile]:
    """The file a URL names, and the other parts if it is part of a split model."""
    for parts in group_models(files):
        if any(part.path == filename for part in parts):
            return parts
    raise DownloadError(f"The repo {repo} has no file {filename}.")
