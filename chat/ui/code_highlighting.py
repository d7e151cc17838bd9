"""How code blocks are highlighted: Pygments made ready before a reply needs
it, and no guessing for a block that names no language.

Pygments imports a language's lexer, and compiles its rules, the first time
that language is highlighted: 25-50 ms for Python on the 2-CPU machine of
docs/performance.md, 7-35 ms for most others. A name it does not know (a
misspelt or made-up language) first makes it look through every installed
package for a plugin lexer (15-80 ms), once per process. In the middle of a
streaming reply that is a frame held up; in the benchmark's code reply it was
a sixth of the UI's time. `warm_up` pays it on a thread of its own while the
app starts, for the languages models write most.

A block with no language is shown as plain code, as CommonMark and GitHub
show it. Textual's Markdown guesses one instead: Pygments imports every lexer
it has and tries each on the code (0.29 s the first time, 3-7 ms each time
after), and a streaming block, highlighted again as it grows, could change
language midway.
"""

from __future__ import annotations

PLAIN = "text"
"""Pygments' lexer for plain text: a block that names no language."""

COMMON_LANGUAGES = (
    "python",
    "bash",
    "javascript",
    "typescript",
    "json",
    "c",
    "cpp",
    "rust",
    "go",
    "java",
    "html",
    "sql",
    "yaml",
    "toml",
    "diff",
    PLAIN,
)
"""The languages whose lexers `warm_up` makes ready (about 0.1 s of one core)."""


def block_language(info: str) -> str:
    """The language a code block is highlighted in: the one its opening fence
    names (the first word of its info string, as CommonMark reads it:
    `` ```python title="a.py" `` is Python), else plain text."""
    words = info.split(maxsplit=1)
    return words[0] if words else PLAIN


def warm_up() -> None:
    """Import and compile the lexers of COMMON_LANGUAGES, and let Pygments
    list the plugin lexers once, so that no reply waits for either. Meant for
    a background thread (about 0.1 s: a quit meanwhile waits for it, as for
    kvchat's other threads). Best effort: a lexer that fails here fails
    again, and is dealt with, where a block is highlighted."""
    from pygments.lexers import find_plugin_lexers
    from textual.highlight import highlight

    for language in COMMON_LANGUAGES:
        try:
            highlight("x\n", language=language)
        except Exception:  # best effort: see the docstring
            continue
    try:
        for _ in find_plugin_lexers():
            pass
    except Exception:  # a broken package's entry point
        return
