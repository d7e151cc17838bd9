"""How a prompt being evaluated is shown: in words, and when.

The same words in the status bar and on one-shot mode's stderr. A prompt
evaluated in a blink shows nothing: progress appears only once evaluation has
taken `SHOW_AFTER_S`, so that a short prompt does not flash a line.
"""

from __future__ import annotations

from chat.engine.protocol import PromptProgress

SHOW_AFTER_S = 0.3


def progress_text(progress: PromptProgress) -> str:
    """In words: `Reading prompt: 1,234 / 5,000 tokens · 410 tok/s · 9 s left`
    (the rate and the time left once the first batch is done)."""
    parts = [f"Reading prompt: {progress.done:,} / {progress.total:,} tokens"]
    rate = progress.rate
    left = progress.seconds_left
    if rate is not None:
        parts.append(f"{rate:,.0f} tok/s")
    if left is not None:
        parts.append(f"{duration_text(left)} left")
    return " · ".join(parts)


def duration_text(seconds: float) -> str:
    """A time to wait, rounded up: `9 s`, `2 min 5 s`, `1 h 3 min` (never `0 s`)."""
    whole = max(1, int(seconds + 0.999))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
