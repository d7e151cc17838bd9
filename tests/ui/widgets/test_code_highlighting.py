"""Code blocks' highlighting: Pygments made ready while the app starts, and a
block that names no language shown plain, never guessed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from textual.widgets import Label

from chat.ui.code_highlighting import COMMON_LANGUAGES, PLAIN, block_language
from chat.ui.widgets.message_view import AssistantMessageView
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, replied

UNNAMED = "Output:\n\n```\ndef add(a, b):\n    return a + b\n\nprint(add(1, 2))\n```\n"
"""Python in a block that names no language (Pygments would guess Python)."""
NAMED = UNNAMED.replace("```\n", "```python\n", 1)
NAMED_AND_MORE = UNNAMED.replace("```\n", '```python title="add.py"\n', 1)


def token_pieces(text: str) -> list[str]:
    return [text[i : i + 3] for i in range(0, len(text), 3)]


def test_a_block_is_highlighted_in_the_language_it_names_else_as_plain_text() -> None:
    assert block_language("python") == "python"
    assert block_language('python title="a.py"') == "python"  # CommonMark: the first word
    assert block_language("") == block_language("  ") == PLAIN


def lexers_ready_after(code: str) -> dict[str, bool]:
    """In a new process (this one may have highlighted already), each common
    language: whether its lexer is imported, and its rules compiled, after
    `code` ran."""
    program = f"""
import json
{code}
from pygments.lexer import RegexLexer
from pygments.lexers import _lexer_cache
ready = {{}}
for language in {COMMON_LANGUAGES!r}:
    names = [name for name, lexer in _lexer_cache.items() if language in lexer.aliases]
    classes = [_lexer_cache[name] for name in names]
    # A lexer of rules compiles them when it is first used; others have none.
    ready[language] = bool(classes) and all(
        "_tokens" in vars(cls) or not issubclass(cls, RegexLexer) for cls in classes
    )
print(json.dumps(ready))
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_warm_up_imports_and_compiles_the_common_lexers() -> None:
    before = lexers_ready_after("")
    assert not any(before.values())  # a new process has none ready
    after = lexers_ready_after("from chat.ui.code_highlighting import warm_up; warm_up()")
    assert after == dict.fromkeys(COMMON_LANGUAGES, True)


async def test_the_app_warms_up_highlighting_as_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import chat.ui.app

    warmed: list[str] = []
    monkeypatch.setattr(
        chat.ui.app,
        "warm_up_highlighting",
        lambda: warmed.append(threading.current_thread().name),
    )
    app = make_app(ScriptedEngine(replies=[["Hi."]]))
    async with app.run_test(size=(100, 30)) as pilot:
        await replied(app, pilot, "hello")
    assert warmed == ["kvchat-highlighting"]  # once, on a thread of kvchat's own


@pytest.mark.parametrize(
    "reply", [UNNAMED, NAMED, NAMED_AND_MORE], ids=["unnamed", "named", "named-and-more"]
)
async def test_a_block_is_highlighted_in_the_language_it_names_and_never_guessed(
    reply: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pygments.lexers

    guessed: list[str] = []

    def guess(code: str, **options: object) -> object:
        guessed.append(code)
        return guess_lexer(code, **options)

    guess_lexer = pygments.lexers.guess_lexer
    monkeypatch.setattr(pygments.lexers, "guess_lexer", guess)
    engine = ScriptedEngine(replies=[token_pieces(reply)], delay=0.01)
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await replied(app, pilot, "code please")
        streamed = app.query(AssistantMessageView).last()
        code = streamed.query_one("#code-content", Label)
        shown = code.content
        # Reopened: the same reply shown whole.
        whole = AssistantMessageView(screen.conversation.messages[-1])
        await streamed.parent.mount(whole)  # type: ignore[union-attr]
        await pilot.pause()
        reopened = whole.query_one("#code-content", Label).content
    assert not guessed
    for content in (shown, reopened):
        colours = {span.style for span in content.spans}  # type: ignore[union-attr]
        if reply is UNNAMED:
            assert len(colours) <= 1  # the code's plain colour only
        else:
            assert len(colours) > 2  # keywords, names, numbers, ...
