"""Real GGUFs with a hostile chat template (copies of the demo model with
`tokenizer.chat_template` rewritten): loading one names the template's fault
in one sentence, soon, instead of hanging or filling the memory; plain ChatML
is used only when the user says so (`model.plain_template`, `--plain-template`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chat.errors import ChatTemplateError
from chat.settings.schema import ModelSettings
from tests.conftest import run_chat
from tests.engine.template_models import with_chat_template

TEMPLATES = {
    "loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        ("ran longer than 1 s", "took more than 2,000,000 steps"),
    ),
    "huge": (
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        ("wrote more than 1 MiB",),
    ),
    "fails": (
        "{{ raise_exception('This template only takes tool calls') }}",
        ("failed: This template only takes tool calls",),
    ),
}


@pytest.fixture(scope="module")
def hostile_models(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("templates")
    return {
        name: with_chat_template(demo_model, folder / f"{name}.gguf", source)
        for name, (source, _) in TEMPLATES.items()
    }


@pytest.mark.parametrize("name", TEMPLATES)
def test_loading_a_model_with_a_hostile_template_names_the_fault(
    hostile_models: dict[str, Path], name: str, tmp_path: Path
) -> None:
    from chat.engine.llama import load_engine

    started = time.monotonic()
    with pytest.raises(ChatTemplateError) as refused:
        load_engine(hostile_models[name], ModelSettings(n_ctx=512), tmp_path / "llama.log")
    assert time.monotonic() - started < 30
    message = str(refused.value)
    assert message.startswith(f"The chat template of {name}.gguf ")
    assert any(reason in message for reason in TEMPLATES[name][1]), message


def test_with_the_user_s_word_plain_chatml_is_used(
    hostile_models: dict[str, Path], tmp_path: Path
) -> None:
    from chat.engine.llama import load_engine

    settings = ModelSettings(n_ctx=512, plain_template=True)
    engine = load_engine(hostile_models["loops"], settings, tmp_path / "llama.log")
    try:
        assert engine.plain_template_reason is not None
        assert "The chat template of loops.gguf" in engine.plain_template_reason
        tokens = engine.tokenize_chat([{"role": "user", "content": "Hi"}])
        text = bytes(engine.llama.detokenize(tokens, special=True)).decode()
        assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    finally:
        engine.close()


_chat = run_chat


def test_one_shot_says_what_failed_and_how_to_agree_to_plain_chatml(
    hostile_models: dict[str, Path],
) -> None:
    model = str(hostile_models["fails"])
    refused = _chat("-p", "Hi", "-m", model, "--max-tokens", "4")
    assert refused.returncode == 2
    assert refused.stderr == (
        "chat: The chat template of fails.gguf failed: This template only takes tool calls. "
        "Start kvchat with --plain-template (or set plain_template = true under [model]) "
        "to use plain ChatML instead.\n"
    )
    agreed = _chat(
        "-p", "Hi", "-m", model, "--max-tokens", "4", "--temperature", "0", "--plain-template"
    )
    assert agreed.returncode == 0, agreed.stderr
    assert agreed.stdout.strip()
    assert agreed.stderr == (
        "chat: warning: The chat template of fails.gguf failed: This template only takes "
        "tool calls. Using plain ChatML, as asked.\n"
    )
