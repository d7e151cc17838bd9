"""Real models with another chat template: a copy of the demo GGUF whose
`tokenizer.chat_template` is rewritten with the `gguf` package (published by
llama.cpp), the way its `gguf-new-metadata` script does it."""

from __future__ import annotations

import logging
from pathlib import Path


def with_chat_template(source: Path, dest: Path, template: str) -> Path:
    """Write a copy of the GGUF `source` to `dest` whose chat template is
    `template`; the tensors are copied as they are."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    logging.getLogger("gguf-new-metadata").setLevel(logging.WARNING)
    reader = gguf.GGUFReader(source, "r")
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dest, arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    new = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, new, [])
    return dest
