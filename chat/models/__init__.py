"""Models on this machine and how to get more: find every GGUF other tools
already downloaded (`catalog`), read what each is without loading it
(`metadata`), tell what it costs in memory at a context size (`memory`)
against the memory free where it would run (`devices`: the GPUs the llama.cpp
build sees), and download new ones from Hugging Face (`download`).

No Textual here, and no llama.cpp model: `devices` only asks the installed
llama.cpp libraries which devices they have. The picker and the CLI call
these off the UI thread (listing walks download caches; reading a header
takes tens of ms).
"""

from chat.models.catalog import ModelEntry, ModelRoots, default_roots, find_models
from chat.models.devices import ComputeDevice, DeviceReport, compute_devices
from chat.models.download import (
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    RemoteFile,
    choose_files,
    list_repo_models,
    pull,
)
from chat.models.memory import (
    MemoryBudget,
    MemoryEstimate,
    available_ram,
    estimate_memory,
    largest_fitting_context,
    memory_budget,
)
from chat.models.metadata import ModelMetadata, read_metadata

__all__ = [
    "ComputeDevice",
    "DeviceReport",
    "DownloadCancelled",
    "DownloadError",
    "DownloadProgress",
    "MemoryBudget",
    "MemoryEstimate",
    "ModelEntry",
    "ModelMetadata",
    "ModelRoots",
    "RemoteFile",
    "available_ram",
    "choose_files",
    "compute_devices",
    "default_roots",
    "estimate_memory",
    "find_models",
    "largest_fitting_context",
    "list_repo_models",
    "memory_budget",
    "pull",
    "read_metadata",
]
