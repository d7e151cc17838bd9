"""Finding the GGUFs other tools downloaded, in their own folder layouts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chat.models.catalog import ModelRoots, default_roots, find_models
from tests.models.gguf_files import write_gguf


def _hf_repo(cache: Path, repo: str, revision: str, files: list[str]) -> None:
    """A hub-cache repo as huggingface_hub lays it out: snapshot links to blobs."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    for name in files:
        blob = folder / "blobs" / f"sha-{name.replace('/', '_')}"
        if not blob.exists():
            write_gguf(blob)
        link = folder / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


def _ollama_model(root: Path, name: str, tag: str, digest: str, namespace: str = "library") -> None:
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:0000"},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.exists():
        write_gguf(blob)


def test_every_source_is_listed_by_its_own_names(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    _hf_repo(hf, "bartowski/Qwen-GGUF", "abc123", ["Qwen-Q4_K_M.gguf", "mmproj-Qwen-f16.gguf"])
    llama = tmp_path / "llama.cpp"
    write_gguf(llama / "ggml-org_gemma-3-1b-it-GGUF_gemma-3-1b-it-Q4_K_M.gguf")
    lms = tmp_path / "lmstudio"
    write_gguf(lms / "lmstudio-community" / "Phi-4-GGUF" / "Phi-4-Q4_K_M.gguf")
    ollama = tmp_path / "ollama"
    _ollama_model(ollama, "llama3.2", "3b", "a" * 64)
    _ollama_model(ollama, "llama3.2", "latest", "a" * 64)  # the same blob, another tag
    _ollama_model(ollama, "mymodel", "v1", "b" * 64, namespace="someone")
    models = tmp_path / "models"
    write_gguf(models / "mine.gguf")
    (models / "notes.txt").write_text("not a model")

    found = find_models(
        ModelRoots(
            models_dir=models, hf_cache=hf, llama_cache=llama, lm_studio=(lms,), ollama=(ollama,)
        )
    )
    assert [(e.source, e.name) for e in found] == [
        ("kvchat models folder", "mine.gguf"),
        ("Hugging Face cache", "bartowski/Qwen-GGUF/Qwen-Q4_K_M.gguf"),
        ("llama.cpp cache", "ggml-org_gemma-3-1b-it-GGUF_gemma-3-1b-it-Q4_K_M.gguf"),
        ("LM Studio", "lmstudio-community/Phi-4-GGUF/Phi-4-Q4_K_M.gguf"),
        ("Ollama", "llama3.2:3b"),
        ("Ollama", "someone/mymodel:v1"),
    ]
    by_name = {e.name: e for e in found}
    assert by_name["llama3.2:3b"].aliases == ("llama3.2:latest",)
    assert by_name["bartowski/Qwen-GGUF/Qwen-Q4_K_M.gguf"].repo == "bartowski/Qwen-GGUF"
    assert all(e.size > 0 and e.problem is None for e in found)


def test_split_models_are_listed_once_and_missing_parts_said(tmp_path: Path) -> None:
    models = tmp_path / "models"
    for part in (1, 2, 3):
        write_gguf(models / f"big-0000{part}-of-00003.gguf", padding=100)
    write_gguf(models / "half-00001-of-00002.gguf")

    found = find_models(ModelRoots(models_dir=models))
    assert [e.name for e in found] == ["big-00001-of-00003.gguf", "half-00001-of-00002.gguf"]
    big, half = found
    assert len(big.parts) == 3 and big.problem is None
    assert big.size == sum(p.stat().st_size for p in big.parts)
    assert half.problem == "1 of its 2 parts is missing"


def test_the_same_file_reached_twice_is_listed_once(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    # Two revisions sharing one blob, and a link to it from the models folder.
    _hf_repo(hf, "org/repo", "old", ["m-Q8_0.gguf"])
    _hf_repo(hf, "org/repo", "new", ["m-Q8_0.gguf"])
    models = tmp_path / "models"
    models.mkdir()
    (models / "linked.gguf").symlink_to(next(hf.glob("models--*/blobs/*")))

    found = find_models(ModelRoots(models_dir=models, hf_cache=hf))
    assert [e.name for e in found] == ["linked.gguf"]
    assert found[0].aliases == ("org/repo/m-Q8_0.gguf",)


def test_missing_unreadable_and_broken_places_are_skipped(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    _hf_repo(hf, "org/repo", "rev", ["ok.gguf"])
    dangling = hf / "models--org--repo" / "snapshots" / "rev" / "downloading.gguf"
    dangling.symlink_to("../../blobs/not-there-yet")
    ollama = tmp_path / "ollama"
    bad = ollama / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    _ollama_model(ollama, "gone", "latest", "c" * 64)
    (ollama / "blobs" / f"sha256-{'c' * 64}").unlink()

    found = find_models(ModelRoots(models_dir=tmp_path / "nowhere", hf_cache=hf, ollama=(ollama,)))
    assert [e.name for e in found] == ["org/repo/ok.gguf"]


def test_default_roots_follow_each_tools_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    roots = default_roots()
    assert roots.hf_cache == tmp_path / "hub"
    assert roots.llama_cache == tmp_path / "llama"
    assert roots.ollama[0] == tmp_path / "ollama"
    assert roots.lm_studio[0] == tmp_path / "home" / ".lmstudio" / "models"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert default_roots().hf_cache == tmp_path / "hfhome" / "hub"


@pytest.mark.model
def test_the_demo_model_is_found_first(demo_model: Path, tmp_path: Path) -> None:
    roots = ModelRoots(demo=demo_model.parent, models_dir=tmp_path)
    found = find_models(roots)
    assert found[0].path == demo_model
    assert found[0].source == "demo model"
