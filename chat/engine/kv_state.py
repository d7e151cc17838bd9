"""A KV cache state on disk: what an engine held, and what it is valid for.

A state is one llama.cpp sequence (`llama_state_seq_get_data`) with the token
ids it holds. It is only valid for the engine that made it: the same model
file (by content, not by name), the same settings that shape the cache, the
same library. `StateIdentity` is that, and a state is restored only into an
engine of exactly the same identity.

The file: a fixed preamble (magic, format version, header length, CRC-32 of
the header), a JSON header (identity, conversation, token count, data size,
CRC-32 of tokens and data), the token ids (int32, little-endian), the state
bytes. Reading checks every part, so a file that was cut short, damaged or
written by something else raises a `StateFileError` that says which, and is
never loaded into the model. Files are written to a temporary name and renamed
into place: a reader never sees half a file under the real name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from chat.whole_files import replace_whole

MAGIC = b"KVCHATKV"
FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sIII")  # magic, version, header length, header CRC-32
_MAX_HEADER = 1 << 20
_TOKEN = "<i4"
"""A token as a state file stores it: a little-endian 32-bit integer."""
_TOKEN_BYTES = 4
_FINGERPRINT_SPAN = 1 << 20
"""Bytes hashed at each end of a model file for its identity."""


class StateFileError(Exception):
    """A state file that cannot be used; `str()` names the file and why."""


class ForeignStateError(StateFileError):
    """Not a kvchat state file, or one of a format this version cannot read."""


class TruncatedStateError(StateFileError):
    """The file ends before the size its header gives."""


class CorruptStateError(StateFileError):
    """The header or the data does not match its checksum, or makes no sense."""


class StateMismatchError(StateFileError):
    """A sound state, made for another model or other cache settings."""


@dataclass(frozen=True)
class StateIdentity:
    """What a KV cache state is valid for: the model file's content and every
    setting that changes the cache's layout or contents."""

    model_size: int
    model_hash: str
    """SHA-256 of the model file's first and last MiB (`model_fingerprint`)."""
    n_ctx: int
    type_k: int
    type_v: int
    """ggml types of the cached keys and values."""
    gpu_layers: int
    flash_attn: bool
    offload_kqv: bool
    swa_full: bool
    library: str
    """llama-cpp-python's version, which fixes llama.cpp's (and the state format)."""
    gpu_build: bool
    """Whether the library was built with GPU offload (same version, other kernels)."""

    def digest(self) -> str:
        """A short stable name for this identity (hex)."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def model_fingerprint(path: Path) -> tuple[int, str]:
    """The model file's size and a SHA-256 of its first and last MiB: two files
    with the same name but other weights (another quantization, a re-download
    of a fixed model) differ here, and it costs two reads of 1 MiB."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        digest.update(file.read(_FINGERPRINT_SPAN))
        if size > _FINGERPRINT_SPAN:
            file.seek(max(_FINGERPRINT_SPAN, size - _FINGERPRINT_SPAN))
            digest.update(file.read(_FINGERPRINT_SPAN))
    digest.update(str(size).encode())
    return size, digest.hexdigest()


@dataclass(frozen=True, eq=False)
class KvState:
    """What a KV cache holds: the token ids and llama.cpp's sequence state."""

    tokens: tuple[int, ...]
    data: bytes | bytearray | memoryview
    """llama.cpp's `llama_state_seq_get_data` of sequence 0 (a writable buffer
    but for `bytes`; a state read from a file maps it)."""
    batches: tuple[tuple[int, int], ...] = ()
    """Where the prompt batches evaluated into it begin and end (the engine
    evaluates a batch again from its start when a prompt resumes inside it)."""

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` this state holds."""
        return common_prefix(self.tokens, tokens)


def common_prefix(held: Sequence[int], tokens: Sequence[int]) -> int:
    n = min(len(held), len(tokens))
    if n == 0:
        return 0
    import numpy as np  # where it is used: see `_token_bytes`

    a = np.asarray(held[:n], dtype=np.int64)
    b = np.asarray(tokens[:n], dtype=np.int64)
    differ = np.flatnonzero(a != b)
    return int(differ[0]) if differ.size else n


@dataclass(frozen=True)
class StateHeader:
    """A state file's header and tokens, read without its data."""

    identity: str
    """`StateIdentity.digest()` of the engine that saved it."""
    conversation_key: str
    tokens: tuple[int, ...]
    batches: tuple[tuple[int, int], ...]
    data_bytes: int
    checksum: int
    saved_at: float
    data_offset: int
    """Where the state bytes begin in the file."""


def write_state(
    path: Path,
    state: KvState,
    identity: StateIdentity,
    conversation_key: str,
    saved_at: float,
) -> int:
    """Write `state` to `path` atomically (a temporary file in the same folder,
    then a rename). Returns the file's size. Raises `OSError` (the temporary
    file is removed)."""
    tokens = _token_bytes(state.tokens)
    checksum = zlib.crc32(state.data, zlib.crc32(tokens))
    header = json.dumps(
        {
            "identity": identity.digest(),
            "identity_fields": dataclasses.asdict(identity),
            "conversation_key": conversation_key,
            "n_tokens": len(state.tokens),
            "batches": [list(span) for span in state.batches],
            "data_bytes": len(state.data),
            "checksum": checksum,
            "saved_at": saved_at,
        }
    ).encode()
    preamble = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header), zlib.crc32(header))
    # Not synced to the disk before the rename: a state is a cache whose
    # checksum is read back, and a quit should not wait for the disk.
    return replace_whole(path, (preamble, header, tokens, state.data), durable=False)


def _token_bytes(tokens: Sequence[int]) -> bytes:
    """`tokens` as a state file stores them.

    numpy is imported in the functions that use it, not at the top: the app
    imports this module (through chat.engine.protocol) before its first frame,
    which is a measured target (docs/performance.md), and numpy's import takes
    about 0.1 s here; a state is read or written only after the model loads."""
    import numpy as np

    return np.asarray(tokens, dtype=_TOKEN).tobytes()


def read_header(path: Path) -> StateHeader:
    """The header and tokens of the state file `path`, checked as far as they
    go without reading the data. Raises `StateFileError` or `OSError`."""
    with path.open("rb") as file:
        return _read_header(file, path, os.fstat(file.fileno()).st_size)


def read_state(path: Path, identity: StateIdentity) -> tuple[StateHeader, KvState]:
    """The state in `path`, checked whole: raises `StateMismatchError` when it
    was made for another identity, another `StateFileError` when it cannot be
    trusted, `OSError` when it cannot be read.

    The data is mapped, not read: the checksum and then llama.cpp read it
    straight from the page cache, which halves a restore's time compared with
    copying it into memory first. The file's size is checked before it is
    mapped; kvchat never changes a state file in place (a new state is a new
    file, renamed into place), so the mapping stays whole."""
    with path.open("rb") as file:
        header = _read_header(file, path, os.fstat(file.fileno()).st_size)
        if header.identity != identity.digest():
            raise StateMismatchError(f"{path} was saved for another model or other cache settings")
        # Copy-on-write: writable as ctypes needs, though nothing writes to it.
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    data = memoryview(mapped)[header.data_offset : header.data_offset + header.data_bytes]
    tokens = _token_bytes(header.tokens)
    if zlib.crc32(data, zlib.crc32(tokens)) != header.checksum:
        raise CorruptStateError(f"{path} is damaged: its data does not match its checksum")
    return header, KvState(header.tokens, data, header.batches)


def _read_header(file: BinaryIO, path: Path, size: int) -> StateHeader:
    preamble = file.read(_PREAMBLE.size)
    if len(preamble) < _PREAMBLE.size:
        if MAGIC.startswith(preamble[: len(MAGIC)]):
            raise TruncatedStateError(f"{path} ends before its header does")
        raise ForeignStateError(f"{path} is not a kvchat state file")
    magic, version, header_size, header_crc = _PREAMBLE.unpack(preamble)
    if magic != MAGIC:
        raise ForeignStateError(f"{path} is not a kvchat state file")
    if version != FORMAT_VERSION:
        raise ForeignStateError(
            f"{path} has state format {version}; this kvchat reads {FORMAT_VERSION}"
        )
    if header_size > _MAX_HEADER:
        raise CorruptStateError(f"{path} is damaged: its header length makes no sense")
    raw = file.read(header_size)
    if len(raw) < header_size:
        raise TruncatedStateError(f"{path} ends before its header does")
    if zlib.crc32(raw) != header_crc:
        raise CorruptStateError(f"{path} is damaged: its header does not match its checksum")
    try:
        fields: dict[str, Any] = json.loads(raw)
        n_tokens = int(fields["n_tokens"])
        data_bytes = int(fields["data_bytes"])
        batches = tuple((int(a), int(b)) for a, b in fields["batches"])
        identity = str(fields["identity"])
        key = str(fields["conversation_key"])
        checksum = int(fields["checksum"])
        saved_at = float(fields["saved_at"])
    except (ValueError, KeyError, TypeError, OverflowError) as error:  # Overflow: 1e999
        raise CorruptStateError(f"{path} is damaged: its header cannot be read ({error})") from None
    if n_tokens < 0 or data_bytes < 0:
        raise CorruptStateError(f"{path} is damaged: negative sizes in its header")
    data_offset = _PREAMBLE.size + header_size + n_tokens * _TOKEN_BYTES
    expected = data_offset + data_bytes
    if size < expected:
        raise TruncatedStateError(f"{path} is cut short: {size:,} of {expected:,} bytes")
    if size > expected:
        raise CorruptStateError(
            f"{path} is damaged: {size - expected:,} bytes more than its header says"
        )
    token_bytes = file.read(n_tokens * _TOKEN_BYTES)
    if len(token_bytes) < n_tokens * _TOKEN_BYTES:
        raise TruncatedStateError(f"{path} ends before its tokens do")
    import numpy as np  # where it is used: see `_token_bytes`

    tokens = tuple(np.frombuffer(token_bytes, dtype=_TOKEN).tolist())
    return StateHeader(identity, key, tokens, batches, data_bytes, checksum, saved_at, data_offset)
