"""Tokenizing a conversation's prompt again each turn, without redoing the
whole conversation.

Every turn the whole conversation is rendered with the chat template and
tokenized again, all of it before the first token, longer as the
conversation grows (docs/performance.md, "Figures behind the code").
llama.cpp splits text at special tokens before it tokenizes, and tokenizes
each stretch between them on its own. So the prompt can be cut before each
special token that opens a message (`<|im_start|>` in ChatML), and each
piece tokenized once and remembered: a new turn tokenizes
only its new pieces (the last reply, the new message, the reply's opening).

A prompt comes as parts: text to tokenize, and token ids that go in as they
are (a reply's sampled tokens, which its text may not tokenize back to). Each
text part is tokenized on its own, as if it were a whole prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import AnyStr

TokenizeBytes = Callable[[bytes, bool], list[int]]
"""llama.cpp's tokenizer: (text as UTF-8, add_bos) -> token ids, special tokens parsed."""

PromptPart = bytes | Sequence[int]
"""Text (UTF-8) to tokenize, or token ids sent as they are."""

TokenizeParts = Callable[[Sequence[PromptPart], bool], list[int]]
"""(parts, add_bos) -> token ids: a prompt's tokens, the BOS (if any) first."""


def tokenize_parts(
    tokenize: TokenizeBytes, parts: Sequence[PromptPart], add_bos: bool
) -> list[int]:
    """Each text part tokenized whole, ids kept as they are; a BOS before the first."""
    tokens: list[int] = []
    for part in parts:
        if isinstance(part, bytes):
            if part:
                tokens += tokenize(part, add_bos and not tokens)
        else:
            tokens += part
    return tokens


class PieceTokenizer:
    """Tokenizes rendered prompts piece by piece, remembering the pieces of the
    last prompt. Gives exactly what `tokenize_parts` gives: a piece that does
    not start with its marker's token falls back to tokenizing each part whole."""

    def __init__(self, tokenize: TokenizeBytes, markers: Iterable[tuple[bytes, int]]) -> None:
        self._tokenize = tokenize
        self._marker_ids = dict(markers)
        # Longest first, as llama.cpp matches special tokens.
        self._longest_first = sorted(self._marker_ids, key=len, reverse=True)
        self._cut = (
            re.compile(b"(?=" + b"|".join(map(re.escape, self._longest_first)) + b")")
            if self._longest_first
            else None
        )
        self._pieces: dict[tuple[bytes, bool], list[int]] = {}

    def __call__(self, parts: Sequence[PromptPart], add_bos: bool) -> list[int]:
        if self._cut is None:
            return tokenize_parts(self._tokenize, parts, add_bos)
        known, self._pieces = self._pieces, {}
        tokens: list[int] = []
        for part in parts:
            if not isinstance(part, bytes):
                tokens += part
                continue
            part_start = len(tokens)
            for piece in self._cut.split(part):
                if not piece:
                    continue
                key = (piece, add_bos and not tokens)  # BOS goes before the first piece only
                ids = known.get(key)
                if ids is None:
                    ids = self._tokenize(piece, key[1])
                    # A cut is right only where llama.cpp also sees the special
                    # token (a part's start needs no check, and may carry a BOS).
                    if len(tokens) > part_start and ids[:1] != [self._marker_id(piece)]:
                        self._pieces = {}  # never reuse pieces of a wrong cut
                        return tokenize_parts(self._tokenize, parts, add_bos)
                self._pieces[key] = ids
                tokens += ids
        return tokens

    def _marker_id(self, piece: bytes) -> int:
        """The token of the marker a piece after the first starts with."""
        return self._marker_ids[next(m for m in self._longest_first if piece.startswith(m))]


def spells_whole(spelled: AnyStr, text: AnyStr) -> bool:
    """Whether a reply's sampled tokens, which `spelled` is the text of, can
    stand for the reply sent whole (`ChatMessage.sampled_whole`): they end
    with its answer `text`, whitespace aside (the parts of a reply that
    thought are kept without the whitespace that led them)."""
    return _squashed(spelled).endswith(_squashed(text))


def _squashed(text: AnyStr) -> AnyStr:
    """`text` without its whitespace."""
    return text[:0].join(text.split())
