"""Counts said in words: "1 token", "2 tokens"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` with thousands separators and the noun in the number it takes."""
    word = noun if count == 1 else (plural or f"{noun}s")
    return f"{count:,} {word}"
