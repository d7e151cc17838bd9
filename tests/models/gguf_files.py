"""Small GGUF files made on the spot: a real header (metadata and tensor
records, in the format llama.cpp writes), and for `write_gguf` zero bytes
where the tensors' data goes (F32 tensors, aligned as llama.cpp aligns them),
so that the file is as long as its header says."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

_UINT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64 = 4, 6, 7, 8, 9, 10


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(value: Any) -> tuple[int, bytes]:
    if isinstance(value, bool):
        return _BOOL, struct.pack("<?", value)
    if isinstance(value, int):
        return (
            (_UINT32, struct.pack("<I", value))
            if value < 2**32
            else (
                _UINT64,
                struct.pack("<Q", value),
            )
        )
    if isinstance(value, float):
        return _FLOAT32, struct.pack("<f", value)
    if isinstance(value, str):
        return _STRING, _string(value)
    if isinstance(value, list):
        kind, _ = _value(value[0])
        items = b"".join(_value(item)[1] for item in value)
        return _ARRAY, struct.pack("<IQ", kind, len(value)) + items
    raise TypeError(value)


def gguf_bytes(fields: dict[str, Any], tensors: dict[str, tuple[int, ...]] | None = None) -> bytes:
    tensors = tensors or {}
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(fields))]
    for key, value in fields.items():
        kind, data = _value(value)
        out += [_string(key), struct.pack("<I", kind), data]
    offset = 0
    for name, shape in tensors.items():
        out += [
            _string(name),
            struct.pack("<I", len(shape)),
            struct.pack(f"<{len(shape)}Q", *shape),
        ]
        out.append(struct.pack("<IQ", 0, offset))  # type F32, data offset
        offset += _aligned(4 * _count(shape))
    return b"".join(out)


ALIGNMENT = 32


def _aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


def _count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def data_size(tensors: dict[str, tuple[int, ...]] | None) -> int:
    """Bytes of tensor data `gguf_bytes`'s header describes after it."""
    sizes = [_aligned(4 * _count(shape)) for shape in (tensors or {}).values()]
    return sum(sizes[:-1]) + 4 * _count(list((tensors or {}).values())[-1]) if sizes else 0


def llama_fields(**overrides: Any) -> dict[str, Any]:
    """A small llama-architecture model, as a converter would describe it."""
    fields: dict[str, Any] = {
        "general.architecture": "llama",
        "general.name": "Tiny Test",
        "general.file_type": 15,
        "llama.block_count": 4,
        "llama.context_length": 4096,
        "llama.embedding_length": 256,
        "llama.feed_forward_length": 512,
        "llama.attention.head_count": 8,
        "llama.attention.head_count_kv": 2,
        "tokenizer.ggml.tokens": ["a", "b", "c", "d"],
        "tokenizer.chat_template": "<|im_start|>{{ message }}<|im_end|>",
    }
    fields.update(overrides)
    return {key: value for key, value in fields.items() if value is not None}


def write_gguf(
    path: Path,
    fields: dict[str, Any] | None = None,
    tensors: dict[str, tuple[int, ...]] | None = None,
    padding: int = 0,
) -> Path:
    """A GGUF at `path` (folders made): the header, the tensors' data (zeros),
    then `padding` more zero bytes standing in for weights."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = gguf_bytes(fields if fields is not None else llama_fields(), tensors)
    data = _aligned(len(header)) - len(header) + data_size(tensors) if tensors else 0
    path.write_bytes(header + bytes(data + padding))
    return path
