"""A copy of a GGUF model with another chat template: its
`tokenizer.chat_template` rewritten with the `gguf` package (published by
llama.cpp; a development dependency, imported only here), the way its
`gguf-new-metadata` script does it. The tests and the benchmark make
reasoning models of the demo model with it (docs/reasoning.md)."""

from __future__ import annotations

import logging
from pathlib import Path


def with_chat_template(source: Path, dest: Path, template: str) -> Path:
    """Write a copy of the GGUF `source` to `dest` whose chat template is
    `template`; the tensors are copied as they are. Raises ImportError
    without the `gguf` package."""
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
