"""Code added to a streaming fenced code block: what the block's code
becomes, said without a parse, is what a parse gives, or nothing is said."""

from __future__ import annotations

import random

from chat.ui.markdown_parser import markdown_parser
from chat.ui.widgets.fence_growth import MAY_CLOSE, grown_fence

OPENINGS = ["```", "~~~", "````", "```python", "~~~ js", "``` py extra", "~~~~~"]
PIECES = [
    "a", "b", " ", "  ", "    ", "\t", "\n", "\n\n", "x = 1", "#", ">", "-", "*", "}",
    "\\", "<div>", "`", "~", "```", "~~~", "````", " ```", "   ~~~", "    ```", "é", "🌊",
    "\r", "\r\n", "\0", "\u2028", "\x0c",
]  # fmt: skip
"""Pieces of code, among them every way a line may close a fence or be read otherwise."""


def parsed(source: str) -> tuple[str, list[int]] | None:
    """The code and line range of `source` when a parse makes it one fenced block."""
    tokens = markdown_parser().parse(source)
    if len(tokens) != 1 or tokens[0].type != "fence" or tokens[0].map is None:
        return None
    return tokens[0].content, tokens[0].map


def test_code_said_without_a_parse_is_what_a_parse_gives() -> None:
    rng = random.Random(33)
    said = refused = 0
    for _ in range(15_000):
        opening = rng.choice(OPENINGS) + "\n"
        body = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 25)))
        cut = rng.randint(0, len(body))
        block, added = opening + body[:cut], body[cut:]
        if parsed(block) is None:  # the block so far must be one open fence
            continue
        grown = grown_fence(block, added)
        if grown is None:
            refused += 1
            continue
        whole = parsed(block + added)
        assert whole is not None, (block, added)
        assert whole[0].rstrip() == grown.code.rstrip(), (block, added)
        assert whole[1] == [0, grown.lines], (block, added)
        said += 1
    assert said > 3_000 and refused > 1_000


def test_code_that_cannot_close_the_block_is_said() -> None:
    block = "```python\ndef keeper(log):\n    for entry in log"
    assert grown_fence(block, ":\n        print(entry)\n") == (
        "def keeper(log):\n    for entry in log:\n        print(entry)\n",
        4,
    )


def test_what_might_close_the_block_or_be_read_otherwise_is_parsed() -> None:
    block = "```python\nprint(1)\n"
    assert grown_fence(block, "```") is None  # closes it
    assert grown_fence(block, "  `") is None  # may close it with what follows
    assert grown_fence(block, "~~~") is None  # not this fence's, but refused alike
    assert grown_fence(block + "  ", "`") is None  # the line's start was in the block
    assert grown_fence(block, "x\r\ny") is None  # the parser changes \r
    assert grown_fence("  ```\ncode\n", "more") is None  # an indented fence trims its lines
    assert grown_fence("    ```\n", "x") is None  # not a fence at all
    assert MAY_CLOSE.search("\n    ```") is None  # 4 spaces: code, not a fence
    assert grown_fence(block, "    ```") is not None
