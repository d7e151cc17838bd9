"""Which tokens of a saved reply were its thinking, for the token view: the
reply's tokens' texts (its recorded choices) split again as they streamed.

The model's markers are not saved with a reply: the family is the one whose
closing (or opening) marker the tokens spell. A reply that thought and spells
neither was cut inside a block its prompt opened: all of it is thinking.
"""

from __future__ import annotations

from collections.abc import Sequence

from chat.engine.reasoning.markers import KNOWN_MARKERS
from chat.engine.reasoning.splitter import ThinkingSplitter


def thinking_tokens(texts: Sequence[str], thought: bool) -> list[bool]:
    """For each token's text of a reply, whether it is part of the thinking
    (its markers included); `thought`: the reply has thinking at all."""
    if not thought:
        return [False] * len(texts)
    joined = "".join(texts)
    markers = next(
        (m for m in KNOWN_MARKERS if m.close in joined or joined.lstrip().startswith(m.open)),
        None,
    )
    if markers is None:
        return [True] * len(texts)
    splitter = ThinkingSplitter(markers, not joined.lstrip().startswith(markers.open))
    kinds: list[bool] = []
    for text in texts:
        for part in splitter.feed(text, 1):
            kinds += [part.kind == "thinking"] * part.tokens
    for part in splitter.flush():
        kinds += [part.kind == "thinking"] * part.tokens
    return (kinds + [False] * len(texts))[: len(texts)]
