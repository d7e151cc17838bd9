"""llama.cpp's KV cache copied out of a loaded model and back in, and what a
copy is valid for.

A copy is the cache's one sequence (`llama_state_seq_*`: the cache only, not
`Llama.save_state()`, which also copies every logit row). chat.engine.kv_state
writes it to disk and reads it back; the engine decides when.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

from chat.engine.kv_state import StateIdentity, model_fingerprint
from chat.engine.protocol import ModelInfo


def identity_of(llm: Any, info: ModelInfo) -> StateIdentity:
    """What the KV cache states of `llm` (loaded as `info`) are valid for (2 MiB
    of the model file read)."""
    params = llm.context_params
    size, digest = model_fingerprint(info.path)
    return StateIdentity(
        model_size=size,
        model_hash=digest,
        n_ctx=info.n_ctx,
        type_k=int(params.type_k),
        type_v=int(params.type_v),
        gpu_layers=info.gpu_layers,
        flash_attn=int(params.flash_attn_type) == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        offload_kqv=bool(params.offload_kqv),
        swa_full=bool(params.swa_full),
        library=llama_cpp.__version__,
        gpu_build=info.gpu_supported,
    )


def copy_sequence(llm: Any, n_tokens: int) -> bytearray | None:
    """The cache's sequence, holding its first `n_tokens`; None when llama.cpp
    gives nothing. The caller holds the context."""
    # Cells past n_tokens are a cut-back batch's leftovers, about to be
    # overwritten: not part of what the cache holds.
    llm._ctx.kv_cache_seq_rm(-1, n_tokens, -1)
    size = int(llama_cpp.llama_state_seq_get_size(llm.ctx, 0))
    data = bytearray(size)
    buffer = (ctypes.c_uint8 * size).from_buffer(data)
    written = int(llama_cpp.llama_state_seq_get_data(llm.ctx, buffer, size, 0))
    del buffer  # a bytearray with an exported buffer cannot be resized
    if written == 0:
        return None
    del data[written:]
    return data


def load_sequence(llm: Any, data: bytes | bytearray | memoryview) -> bool:
    """Load a copied sequence into the cache; False when llama.cpp refuses it
    (it has then emptied the sequence). The caller holds the context."""
    writable = bytearray(data) if isinstance(data, bytes) else data
    size = writable.nbytes if isinstance(writable, memoryview) else len(writable)
    buffer = (ctypes.c_uint8 * size).from_buffer(writable)
    loaded = llama_cpp.llama_state_seq_set_data(llm.ctx, buffer, size, 0)
    del buffer
    return bool(loaded != 0)
