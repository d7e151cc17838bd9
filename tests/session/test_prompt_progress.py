"""The words prompt progress is shown in (status bar and one-shot stderr)."""

from __future__ import annotations

from chat.engine.protocol import PromptProgress
from chat.session.prompt_progress import duration_text, progress_text


def test_before_the_first_batch_only_the_counts() -> None:
    assert progress_text(PromptProgress(0, 5_000, 0.0)) == "Reading prompt: 0 / 5,000 tokens"


def test_then_the_rate_and_the_time_left() -> None:
    text = progress_text(PromptProgress(1_024, 5_000, 2.5))
    assert text == "Reading prompt: 1,024 / 5,000 tokens · 410 tok/s · 10 s left"


def test_durations_round_up() -> None:
    assert [duration_text(s) for s in (0.0, 0.2, 9.1, 60, 125, 3_600, 3_780)] == [
        "1 s",
        "1 s",
        "10 s",
        "1 min",
        "2 min 5 s",
        "1 h",
        "1 h 3 min",
    ]
