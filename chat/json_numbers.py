"""Numbers in JSON from outside kvchat: a model server's answer, a
conversation file to import. Python's json module reads an integer of any
length (float() of one past about 1e308 raises OverflowError, and SQLite
stores none past 64 bits) and reads NaN and Infinity, which JSON does not
have; and true and false are ints to Python. Each check here says whether a
value is a number kvchat can hold."""

from __future__ import annotations

import math
from typing import TypeGuard

SQLITE_INTEGERS = range(-(2**63), 2**63)
"""The whole numbers SQLite stores."""


def is_whole_number(value: object) -> TypeGuard[int]:
    """A JSON integer that SQLite can store (not true or false)."""
    return isinstance(value, int) and not isinstance(value, bool) and value in SQLITE_INTEGERS


def _as_float(value: object) -> float | None:
    """A JSON number as a float (NaN and Infinity too), or None: not true or
    false, nor an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def finite_number(value: object) -> float | None:
    """A JSON number as a float, or None: not true or false, NaN or Infinity,
    nor an integer too large for a float."""
    number = _as_float(value)
    return number if number is not None and math.isfinite(number) else None


def is_finite_number(value: object) -> bool:
    """`finite_number` has one for `value`."""
    return finite_number(value) is not None


LATEST_TIME = 2**37
"""Later than this (the year 6325) is no time a message was written at; the
C library's dates end not far beyond it on some platforms (`time.localtime`
of 1e300 raises OverflowError)."""


def is_time(value: object) -> bool:
    """A time (seconds since the epoch) that dates can be shown for."""
    number = finite_number(value)
    return number is not None and abs(number) < LATEST_TIME


def is_figure(value: object) -> bool:
    """A reply's figure (a rate, a time): a number a float holds, Infinity
    among them (JSON as Python writes it: a rate of tokens in no time), not
    NaN (SQLite stores it as no value) nor an integer too large for a float."""
    number = _as_float(value)
    return number is not None and not math.isnan(number)


def is_count(value: object) -> TypeGuard[int]:
    """A count of tokens (or of anything): a whole number, 0 or more, that
    SQLite can store. A server's count past 64 bits failed the reply's save."""
    return is_whole_number(value) and value >= 0


MAX_TOKEN_ID = 2**31 - 1
"""Token ids are saved as 32-bit integers (chat.conversations.message_rows)."""


def is_token_id(value: object) -> TypeGuard[int]:
    """A JSON integer that can be a token id kvchat saves."""
    return is_whole_number(value) and 0 <= value <= MAX_TOKEN_ID
