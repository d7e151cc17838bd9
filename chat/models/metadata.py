"""What a GGUF file says about its model, read without loading the weights.

A GGUF file starts with a header: key-value metadata (architecture, sizes,
tokenizer, chat template) and one record per tensor (name, shape, type), then
the tensor data. Only the header is read here (at most `MAX_HEADER` bytes),
and the file's length is checked against where the header says the last
tensor's data ends: a download cut short is named, not loaded.

Why not `gguf.GGUFReader`, the reader llama.cpp publishes: it turns every
metadata array into numpy objects, the 49,152 vocabulary strings of the demo
model included, which takes seconds even for the demo model
(docs/performance.md, "Figures behind the code"). This parser skips the
vocabulary (only its length is kept).
"""

from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from chat.errors import ModelError
from chat.safe_files import UnsafeFileError, human_limit, open_regular

GGUF_MAGIC = b"GGUF"
_HEADER_CHUNK = 1 << 20
"""Bytes read at a time: a header is a few MB at most (the vocabulary)."""
_MAX_STRING = 1 << 26
"""A longer string means a damaged file, not a real key or chat template."""
MAX_HEADER = 1 << 28
"""A larger header means a damaged file (real ones, vocabulary included, are
tens of MB): reading stops there instead of pulling the weights into memory."""
_DEFAULT_ALIGNMENT = 32
_TOKEN_EMBEDDING = "token_embd.weight"
_OUTPUT = "output.weight"
_SIZED_TENSORS = (_TOKEN_EMBEDDING, _OUTPUT)
_BLOCKS = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 40),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
}
"""Tensor types (ggml.h: enum ggml_type) -> (values per block, bytes per
block), as the `gguf` package's GGML_QUANT_SIZES gives them. A type not
listed counts for its offset only, so a newer type never makes a whole file
look cut short."""

# GGUF value types (gguf.h: enum gguf_type) and the struct code of the fixed-size ones.
_STRING, _ARRAY = 8, 9
_SCALARS = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}

FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}
"""`general.file_type` (llama.h: enum llama_ftype) as llama-quantize names it."""

_SWA_EVERY = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "llama4": 4}
"""Architectures whose files say `attention.sliding_window` but not which
layers use it: one layer in N attends to the whole context, the others to the
window (llama.cpp's `set_swa_pattern` for these architectures)."""

# Chat template families, from text only the family's templates contain. Order
# matters: phi-4 and qwen use chatml's markers, so the more specific come first.
_TEMPLATE_FAMILIES = (
    ("harmony", ("<|start|>", "<|channel|>")),
    ("llama3", ("<|start_header_id|>",)),
    ("gemma", ("<start_of_turn>",)),
    ("command-r", ("<|START_OF_TURN_TOKEN|>",)),
    ("granite", ("<|start_of_role|>",)),
    ("deepseek", ("<｜User｜>",)),
    ("phi", ("<|user|>", "<|end|>")),
    ("zephyr", ("<|user|>",)),
    ("chatml", ("<|im_start|>",)),
    ("llama2", ("[INST]", "<<SYS>>")),
    ("mistral", ("[INST]",)),
)

SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""A part of a split GGUF, as llama-gguf-split names it: `name-00001-of-00003.gguf`."""


@dataclass(frozen=True)
class ModelMetadata:
    """A GGUF model as its header describes it. Sizes are in bytes; counts
    that the file leaves out are None (or 0 for the attention sizes, which
    then make the memory estimate fail loudly rather than guess)."""

    path: Path
    name: str
    """`general.name`, else the file name without `.gguf`."""
    architecture: str
    """`general.architecture`: llama, qwen2, gemma3, ..."""
    size_label: str | None
    """`general.size_label` as the file gives it ("135M", "8x7B"), if it does."""
    n_params: int
    """Parameters, summed from the tensor shapes (every part of a split file)."""
    quantization: str
    """Q4_K_M, Q4_1, F16, ... from `general.file_type`; "unknown" without it."""
    file_size: int
    """The file, all parts of a split model together: what loading maps into memory."""
    n_parts: int
    context_length: int | None
    """Tokens the model was trained for (`{arch}.context_length`)."""
    chat_template: str | None
    chat_format: str | None
    """The template's family (chatml, llama3, gemma, mistral, phi, ...), None if unknown."""
    block_count: int
    embedding_length: int
    feed_forward_length: int
    head_count: int
    head_count_kv: tuple[int, ...]
    """KV heads of each layer (most models: the same number for every layer;
    0 for a layer without attention)."""
    key_length: int
    """Size of one key head: `attention.key_length`, else embedding / heads."""
    value_length: int
    sliding_window: int | None
    """Tokens a sliding-window layer attends to, if the model has such layers."""
    swa_layers: int
    """Layers that use the sliding window (0 without one)."""
    vocab_size: int
    input_embedding_bytes: int = 0
    """The token embedding table (`token_embd.weight`), which llama.cpp keeps in
    RAM however many layers go to a GPU (its input is a lookup, not a product)."""
    tied_output: bool = False
    """The output layer reuses the token embedding (no `output.weight`): a GPU
    that takes the output layer then holds a second copy of the table."""

    @property
    def parameters_text(self) -> str:
        """ "135M", "7.2B": the file's own label, else the count rounded; "?"
        when the file names no tensors to count."""
        if self.size_label:
            return self.size_label
        for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if self.n_params >= scale:
                return f"{self.n_params / scale:.3g}{unit}"
        return str(self.n_params) if self.n_params else "?"


@dataclass(frozen=True)
class _Header:
    fields: dict[str, Any]
    """Scalars and strings as Python values; arrays of strings as their length
    only (`_ArrayLength`), other arrays as lists."""
    tensor_elements: int
    tensor_bytes: dict[str, int]
    """The bytes of the tensors whose size the memory estimate needs, by name."""
    data_end: int
    """Where the last tensor's data ends: the least length of a whole file."""


@dataclass(frozen=True)
class _ArrayLength:
    """An array of strings that was skipped (the vocabulary): its length only."""

    length: int


class _Reader:
    """Sequential reads over a buffered file, in the file's byte order."""

    def __init__(self, file: BinaryIO, path: Path) -> None:
        self._file = file
        self._path = path
        self._buffer = b""
        self._pos = 0
        self._read = 0  # bytes taken from the file so far
        self.order = "<"

    def tell(self) -> int:
        """The position in the file of the next byte to read."""
        return self._read - (len(self._buffer) - self._pos)

    def _ensure(self, size: int) -> None:
        """Make the next `size` bytes available in the buffer."""
        if self._pos + size <= len(self._buffer):
            return
        if self.tell() + size > MAX_HEADER:
            raise _damaged(self._path, f"a header larger than {human_limit(MAX_HEADER)}")
        rest = self._buffer[self._pos :]
        more = self._file.read(max(size - len(rest), _HEADER_CHUNK))
        self._read += len(more)
        self._buffer, self._pos = rest + more, 0
        if len(self._buffer) < size:
            raise ModelError(
                f"The model file is cut short: {self._path} ends inside its header "
                "(an interrupted download?)."
            )

    def take(self, size: int) -> bytes:
        self._ensure(size)
        chunk = self._buffer[self._pos : self._pos + size]
        self._pos += size
        return chunk

    def number(self, code: str) -> Any:
        return struct.unpack(self.order + code, self.take(struct.calcsize(code)))[0]

    def string(self) -> str:
        length = self.number("Q")
        if length > _MAX_STRING:
            raise _damaged(self._path, f"a string of {length} bytes")
        return self.take(length).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        # The hot loop of a header (one pass per vocabulary entry): lengths are
        # read in place, without slicing the strings out.
        length_at = struct.Struct(self.order + "Q").unpack_from
        for _ in range(count):
            self._ensure(8)
            (length,) = length_at(self._buffer, self._pos)
            if length > _MAX_STRING:
                raise _damaged(self._path, f"a string of {length} bytes")
            self._ensure(8 + length)
            self._pos += 8 + length

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.number(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.number("I"), self.number("Q")
            if item_kind == _STRING:
                # The vocabulary and merges: tens of thousands of strings nobody here reads.
                self.skip_strings(count)
                return _ArrayLength(count)
            if item_kind in _SCALARS:
                code = _SCALARS[item_kind]
                data = self.take(struct.calcsize(code) * count)
                return list(struct.unpack(f"{self.order}{count}{code}", data))
            raise _damaged(self._path, f"an array of value type {item_kind}")
        raise _damaged(self._path, f"value type {kind}")


def _damaged(path: Path, what: str) -> ModelError:
    return ModelError(f"The model file is damaged: {path} has {what} in its header.")


def _read_header(path: Path) -> _Header:
    try:
        fd = open_regular(path, what="model file")
    except UnsafeFileError as error:
        raise ModelError(str(error)) from error
    try:
        with os.fdopen(fd, "rb") as file:
            reader = _Reader(file, path)
            if reader.take(4) != GGUF_MAGIC:
                raise ModelError(
                    f"Not a GGUF model file: {path} (llama.cpp needs .gguf; "
                    "convert the model or pick another)."
                )
            version = reader.number("I")
            if version > 0xFFFF:  # written on a big-endian machine
                reader.order = ">"
                version = struct.unpack(">I", struct.pack("<I", version))[0]
            if version < 2:
                raise ModelError(
                    f"The model file {path} uses GGUF version {version}, which llama.cpp "
                    "no longer reads: download it again in a current format."
                )
            n_tensors, n_fields = reader.number("Q"), reader.number("Q")
            fields: dict[str, Any] = {}
            for _ in range(n_fields):
                key = reader.string()
                fields[key] = reader.value(reader.number("I"))
            elements = 0
            data_size = 0
            sizes: dict[str, int] = {}
            for _ in range(n_tensors):
                name = reader.string()
                n_dims = reader.number("I")
                if n_dims > 8:
                    raise _damaged(path, f"a tensor of {n_dims} dimensions")
                dims = struct.unpack(f"{reader.order}{n_dims}Q", reader.take(8 * n_dims))
                kind, offset = reader.number("I"), reader.number("Q")
                count = 1
                for dim in dims:
                    count *= dim
                elements += count
                per_block, block_bytes = _BLOCKS.get(kind, (1, 0))
                data_size = max(data_size, offset + -(-count // per_block) * block_bytes)
                if name in _SIZED_TENSORS:
                    sizes[name] = -(-count // per_block) * block_bytes
            alignment = _int(fields.get("general.alignment"), _DEFAULT_ALIGNMENT) or 1
            data_start = -(-reader.tell() // alignment) * alignment
    except OSError as error:
        raise ModelError(
            f"Cannot read the model file {path}: {error.strerror or error}."
        ) from error
    except (struct.error, MemoryError, OverflowError) as error:
        raise _damaged(path, "values that make no sense") from error
    return _Header(fields, elements, sizes, data_start + data_size if n_tensors else 0)


def _check_whole(path: Path, header: _Header) -> int:
    """The file's length, which must reach the end of its tensor data."""
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ModelError(
            f"Cannot read the model file {path}: {error.strerror or error}."
        ) from error
    if size < header.data_end:
        raise ModelError(
            f"The model file is cut short: {path} holds {size:,} bytes and its header "
            f"describes {header.data_end:,} (an interrupted download?)."
        )
    return size


def split_parts(path: Path) -> list[Path]:
    """Every part of the split model whose first part is `path` (just `path`
    for a single file). Parts that are missing are left out."""
    match = SPLIT_NAME.match(path.name)
    if not match:
        return [path]
    prefix, count = match["prefix"], int(match["count"])
    names = [f"{prefix}-{number:05d}-of-{count:05d}.gguf" for number in range(1, count + 1)]
    return [path.with_name(name) for name in names if path.with_name(name).exists()]


MOST_LAYERS = 4096
"""More layers than a header may say a model has: far above any model's (and
above the 512 that llama.cpp loads)."""


def read_metadata(path: Path) -> ModelMetadata:
    """The model described by the GGUF at `path` (the first part of a split
    model). Raises `ModelError` naming the file if it is not a readable GGUF."""
    header = _read_header(path)
    fields = header.fields
    arch = _text(fields.get("general.architecture")) or "unknown"

    def arch_int(key: str, default: int = 0) -> int:
        return _int(fields.get(f"{arch}.{key}"), default)

    parts = split_parts(path)
    expected_parts = _int(fields.get("split.count"), 1)
    if len(parts) < expected_parts:
        raise ModelError(
            f"The model {path} is split in {expected_parts} files and only {len(parts)} "
            "are there: download the missing parts."
        )
    elements = header.tensor_elements
    file_size = _check_whole(path, header)
    tensor_bytes = dict(header.tensor_bytes)
    for part in parts[1:]:
        part_header = _read_header(part)
        file_size += _check_whole(part, part_header)
        elements += part_header.tensor_elements
        tensor_bytes.update(part_header.tensor_bytes)

    block_count = arch_int("block_count")
    if not 0 <= block_count <= MOST_LAYERS:
        # Each layer's figures are listed: 2**64 layers were a list no memory holds.
        raise ModelError(
            f"The model {path} says it has {block_count:,} layers, which no model has: "
            "the file is damaged."
        )
    embedding = arch_int("embedding_length")
    heads = _per_layer(fields.get(f"{arch}.attention.head_count"), block_count)
    head_count = max(heads, default=0)
    raw_kv = fields.get(f"{arch}.attention.head_count_kv")
    kv_heads = _per_layer(raw_kv, block_count) if raw_kv is not None else heads
    head_size = embedding // head_count if head_count else 0
    sliding = arch_int("attention.sliding_window") or None
    template = _text(fields.get("tokenizer.chat_template"))
    file_type = fields.get("general.file_type")
    vocab = fields.get("tokenizer.ggml.tokens")
    return ModelMetadata(
        path=path,
        name=_text(fields.get("general.name")) or path.name.removesuffix(".gguf"),
        architecture=arch,
        size_label=_text(fields.get("general.size_label")),
        n_params=elements,
        quantization=FILE_TYPES.get(file_type, "unknown")
        if isinstance(file_type, int)
        else "unknown",
        file_size=file_size,
        n_parts=len(parts),
        context_length=arch_int("context_length") or None,
        chat_template=template,
        chat_format=template_family(template),
        block_count=block_count,
        embedding_length=embedding,
        feed_forward_length=max(
            _per_layer(fields.get(f"{arch}.feed_forward_length"), 1), default=0
        ),
        head_count=head_count,
        head_count_kv=tuple(kv_heads),
        key_length=arch_int("attention.key_length", head_size),
        value_length=arch_int("attention.value_length", head_size),
        sliding_window=sliding,
        swa_layers=_swa_layers(fields, arch, block_count) if sliding else 0,
        vocab_size=arch_int("vocab_size", vocab.length if isinstance(vocab, _ArrayLength) else 0),
        input_embedding_bytes=tensor_bytes.get(_TOKEN_EMBEDDING, 0),
        tied_output=_TOKEN_EMBEDDING in tensor_bytes and _OUTPUT not in tensor_bytes,
    )


def template_family(template: str | None) -> str | None:
    """The family of a Jinja chat template (chatml, llama3, gemma, ...), None
    if it is none kvchat knows."""
    if not template:
        return None
    for family, markers in _TEMPLATE_FAMILIES:
        if all(marker in template for marker in markers):
            return family
    return None


def _swa_layers(fields: dict[str, Any], arch: str, block_count: int) -> int:
    pattern = fields.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):  # one flag per layer: true where the window applies
        return sum(1 for flag in pattern if flag)
    every = pattern if isinstance(pattern, int) and pattern > 0 else _SWA_EVERY.get(arch)
    if every is None:
        # The file does not say which layers: counting every layer as full
        # attention overestimates memory, which is the safe side.
        return 0
    return sum(1 for layer in range(block_count) if (layer + 1) % every != 0)


def _per_layer(value: Any, block_count: int) -> list[int]:
    """A count the file gives once for all layers or as one value per layer."""
    if isinstance(value, list):
        return [_int(v) for v in value]
    return [_int(value)] * max(block_count, 1) if value is not None else []


def _int(value: Any, default: int = 0) -> int:
    """A whole number from the header; `default` where the file holds none
    there (a string, true, NaN or Infinity where a count goes: a broken or
    hostile file, in a folder every picker lists)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, float) and not math.isfinite(value):
        return default
    return int(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
