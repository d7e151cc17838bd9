"""Reading a GGUF header: what the picker shows and the memory estimate needs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chat.errors import ModelError
from chat.models.metadata import read_metadata, template_family
from tests.models.gguf_files import gguf_bytes, llama_fields, write_gguf


@pytest.mark.model
def test_demo_model_read_matches_what_llama_cpp_reports(demo_model: Path) -> None:
    import llama_cpp

    started = time.perf_counter()
    meta = read_metadata(demo_model)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"reading the header took {elapsed:.2f} s"

    llm = llama_cpp.Llama(str(demo_model), n_ctx=256, verbose=True)
    try:
        model = llm.model
        assert meta.context_length == llama_cpp.llama_model_n_ctx_train(model)
        assert meta.block_count == llama_cpp.llama_model_n_layer(model)
        assert meta.head_count == llama_cpp.llama_model_n_head(model)
        assert set(meta.head_count_kv) == {llama_cpp.llama_model_n_head_kv(model)}
        assert meta.embedding_length == llama_cpp.llama_model_n_embd(model)
        assert meta.n_params == llama_cpp.llama_model_n_params(model)
        assert meta.vocab_size == llama_cpp.llama_vocab_n_tokens(
            llama_cpp.llama_model_get_vocab(model)
        )
        assert meta.chat_template == llm.metadata["tokenizer.chat_template"]
    finally:
        llm.close()
    assert meta.quantization == "Q4_1"
    assert meta.parameters_text == "135M"
    assert meta.chat_format == "chatml"
    assert meta.file_size == demo_model.stat().st_size
    assert (meta.key_length, meta.value_length) == (64, 64)  # 576 / 9 heads
    assert meta.sliding_window is None


def test_sizes_the_file_leaves_out_are_derived(tmp_path: Path) -> None:
    tensors = {"token_embd.weight": (256, 4), "blk.0.attn_q.weight": (256, 256)}
    path = write_gguf(tmp_path / "tiny.gguf", llama_fields(), tensors)
    meta = read_metadata(path)
    assert meta.n_params == 256 * 4 + 256 * 256
    assert meta.parameters_text == "66.6K"
    assert meta.quantization == "Q4_K_M"
    assert meta.head_count_kv == (2, 2, 2, 2)
    assert meta.key_length == meta.value_length == 32  # 256 / 8
    assert meta.vocab_size == 4  # from the vocabulary's length
    assert meta.name == "Tiny Test"


def test_explicit_head_sizes_and_a_sliding_window(tmp_path: Path) -> None:
    fields = llama_fields(
        **{
            "general.architecture": "gemma3",
            "gemma3.block_count": 12,
            "gemma3.context_length": 32768,
            "gemma3.embedding_length": 640,
            "gemma3.attention.head_count": 4,
            "gemma3.attention.head_count_kv": 1,
            "gemma3.attention.key_length": 256,
            "gemma3.attention.value_length": 256,
            "gemma3.attention.sliding_window": 512,
            "tokenizer.chat_template": "<start_of_turn>user\n{{ m }}<end_of_turn>",
        }
    )
    meta = read_metadata(write_gguf(tmp_path / "gemma.gguf", fields))
    assert (meta.key_length, meta.value_length) == (256, 256)
    assert meta.sliding_window == 512
    assert meta.swa_layers == 10  # five layers in six use the window
    assert meta.chat_format == "gemma"


def test_split_model_adds_up_its_parts(tmp_path: Path) -> None:
    for number in (1, 2):
        fields = llama_fields(**{"split.count": 2, "split.no": number - 1})
        write_gguf(tmp_path / f"big-0000{number}-of-00002.gguf", fields, {"t": (10, 10)}, 1000)
    meta = read_metadata(tmp_path / "big-00001-of-00002.gguf")
    assert meta.n_parts == 2
    assert meta.n_params == 200
    assert meta.file_size == sum(p.stat().st_size for p in tmp_path.iterdir())


def test_split_model_with_a_part_missing_is_named(tmp_path: Path) -> None:
    fields = llama_fields(**{"split.count": 3})
    path = write_gguf(tmp_path / "big-00001-of-00003.gguf", fields)
    with pytest.raises(ModelError, match="split in 3 files and only 1 are there"):
        read_metadata(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "cut short"),
        (b"PK\x03\x04 a zip file", "Not a GGUF model file"),
        (gguf_bytes(llama_fields())[:300], "cut short"),
        (b"GGUF\x03\x00\x00\x00" + bytes(8) + b"\x01" + bytes(7) + b"\xff" * 8, "damaged"),
        (b"GGUF\x01\x00\x00\x00" + bytes(16), "GGUF version 1"),
    ],
    ids=["empty", "zip", "truncated", "absurd-string", "version-1"],
)
def test_damaged_or_foreign_files_raise_one_sentence_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=message) as raised:
        read_metadata(path)
    assert str(path) in str(raised.value)


def test_unreadable_file_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"missing\.gguf cannot be opened: no such file"):
        read_metadata(tmp_path / "missing.gguf")


@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("{{'<|im_start|>' + m['role']}}", "chatml"),
        ("<|start_header_id|>{{ role }}<|end_header_id|>", "llama3"),
        ("<start_of_turn>user", "gemma"),
        ("[INST] {{ m }} [/INST]", "mistral"),
        ("[INST] <<SYS>>\n{{ s }}\n<</SYS>>", "llama2"),
        ("<|user|>\n{{ m }}<|end|>\n<|assistant|>", "phi"),
        ("<|start|>assistant<|channel|>final<|message|>", "harmony"),
        ("{{ unknown }}", None),
        (None, None),
    ],
)
def test_chat_template_family(template: str | None, family: str | None) -> None:
    assert template_family(template) == family
