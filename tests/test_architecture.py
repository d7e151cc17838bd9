"""House rules that keep the layers apart."""

from __future__ import annotations

import subprocess
import sys

import pytest

NON_UI_MODULES = [
    "chat.settings.resolve",
    "chat.conversations.conversation",
    "chat.engine",
    "chat.engine.base",
    "chat.engine.llama",
    "chat.engine.reply_text",
    "chat.model_files",
    "chat.paths",
    "chat.sanitize",
    "chat.errors",
    "chat.cli.oneshot",
    "chat.cli.main",
    "chat.conversations.store",
    "chat.conversations.transcript",
    "chat.conversations.saver",
    "chat.conversations.export",
    "chat.cli.conversations",
]


@pytest.mark.parametrize("module", NON_UI_MODULES)
def test_non_ui_modules_do_not_import_textual(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "print(any(m == 'textual' or m.startswith('textual.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ui_never_imports_llama_cpp() -> None:
    code = "import sys, chat.ui.app; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
