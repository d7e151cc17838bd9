"""Token probabilities on disk: a compact, compressed form, decoded on first use.

A reply's `TokenChoice`s (one per token, each with ten alternatives) are about
half a kilobyte per token as JSON objects. They are stored in the message's
`token_probs` BLOB as zlib-compressed JSON arrays (no repeated keys):

    {"v": 1, "tokens": [[token_id, text, prob, raw_prob, greedy, top, raw_top], ...]}

where `top` and `raw_top` are `[[text, prob], ...]`. JSON keeps the data
readable with nothing but `sqlite3` and `zlib`; compression takes it to roughly
a fifth. Floats keep full precision, so a reloaded reply shows exactly what was
recorded.

Opening a long saved conversation must not decode every reply's tokens: the
store hands back `StoredTokenChoices`, which keeps the bytes and decodes them
the first time the token view reads them. No I/O and no Textual here.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, overload

from chat.conversations.conversation import TokenChoice

FORMAT_VERSION = 1


class TokenProbsFormatError(ValueError):
    """Stored token probabilities that this version cannot read."""


def _pairs(items: Sequence[tuple[str, float]]) -> list[list[Any]]:
    return [[text, prob] for text, prob in items]


def encode_token_probs(choices: Sequence[TokenChoice]) -> bytes:
    if isinstance(choices, StoredTokenChoices):
        return choices.data  # unchanged: no need to decode and encode again
    rows = [
        [c.token_id, c.text, c.prob, c.raw_prob, int(c.greedy), _pairs(c.top), _pairs(c.raw_top)]
        for c in choices
    ]
    text = json.dumps({"v": FORMAT_VERSION, "tokens": rows}, separators=(",", ":"))
    return zlib.compress(text.encode("utf-8"), 6)


def decode_token_probs(data: bytes) -> list[TokenChoice]:
    """Raises `TokenProbsFormatError` for damaged data or an unknown version."""
    try:
        value = json.loads(zlib.decompress(data).decode("utf-8"))
        if not isinstance(value, dict) or value.get("v") != FORMAT_VERSION:
            version = value.get("v") if isinstance(value, dict) else None
            raise TokenProbsFormatError(f"unknown format version {version!r}")
        return [
            TokenChoice(
                token_id=int(token_id),
                text=str(text),
                prob=float(prob),
                raw_prob=float(raw_prob),
                top=[(str(t), float(p)) for t, p in top],
                raw_top=[(str(t), float(p)) for t, p in raw_top],
                greedy=bool(greedy),
            )
            for token_id, text, prob, raw_prob, greedy, top, raw_top in value["tokens"]
        ]
    except TokenProbsFormatError:
        raise
    except (zlib.error, UnicodeDecodeError, ValueError, TypeError, KeyError) as error:
        raise TokenProbsFormatError(f"damaged data ({error})") from error


class StoredTokenChoices(Sequence[TokenChoice]):
    """A reply's token choices as stored: decoded the first time they are read.

    Data that cannot be decoded reads as an empty sequence, with `problem`
    saying why, so one damaged row never stops a conversation from opening.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._choices: list[TokenChoice] | None = None
        self.problem: str | None = None

    @classmethod
    def encoded(cls, choices: Sequence[TokenChoice]) -> StoredTokenChoices:
        """`choices` with their stored form made now: a reply's choices are
        encoded on the thread that ran the reply, not on the UI thread that
        saves the reply as it ends (300 tokens' took it 5-6 ms)."""
        stored = cls(encode_token_probs(choices))
        stored._choices = list(choices)
        return stored

    def _decoded(self) -> list[TokenChoice]:
        if self._choices is None:
            try:
                self._choices = decode_token_probs(self.data)
            except TokenProbsFormatError as error:
                self.problem = str(error)
                self._choices = []
        return self._choices

    @property
    def decoded(self) -> bool:
        return self._choices is not None

    @overload
    def __getitem__(self, index: int) -> TokenChoice: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[TokenChoice]: ...

    def __getitem__(self, index: int | slice) -> TokenChoice | Sequence[TokenChoice]:
        return self._decoded()[index]

    def __len__(self) -> int:
        return len(self._decoded())

    def __iter__(self) -> Iterator[TokenChoice]:
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, like list

    def __repr__(self) -> str:
        state = f"{len(self)} tokens" if self.decoded else f"{len(self.data)} bytes, not decoded"
        return f"StoredTokenChoices({state})"
