"""Byte sizes as people read them: one unit system (binary: KiB, MiB, GiB)
for every size kvchat shows, in the model list, downloads and memory figures."""

from __future__ import annotations


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
