"""What the model could have said: the distribution behind each sampled token.

A `logits_processor` sees the raw logits of the current step (no `logits_all`,
which would keep n_ctx x vocabulary floats). After the token is sampled, the
step is summarised: the chosen token's probability and the top alternatives,
both in the raw model distribution and after the sampling settings
(top-k, typical-p, top-p, min-p, then temperature, in llama.cpp's order).
Repetition penalties are not replayed: they depend on llama.cpp's own history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chat.config import SamplingSettings
from chat.conversation import TokenChoice

TOP_N = 5
Logits = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ReplyProbSummary:
    mean_prob: float
    least_likely: TokenChoice | None
    not_greedy: int
    """Tokens sampled from outside the greedy (most likely) choice."""
    tokens: int


def summarize(choices: list[TokenChoice]) -> ReplyProbSummary:
    if not choices:
        return ReplyProbSummary(0.0, None, 0, 0)
    return ReplyProbSummary(
        mean_prob=sum(c.prob for c in choices) / len(choices),
        least_likely=min(choices, key=lambda c: c.prob),
        not_greedy=sum(1 for c in choices if not c.greedy),
        tokens=len(choices),
    )


def _softmax(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def sampled_distribution(logits: Logits, sampling: SamplingSettings) -> npt.NDArray[np.float64]:
    """The distribution llama.cpp samples from, over the whole vocabulary."""
    raw = logits.astype(np.float64)
    if sampling.temperature <= 0:
        greedy = np.zeros_like(raw)
        greedy[int(raw.argmax())] = 1.0
        return greedy
    order = np.argsort(-raw)
    keep = np.ones(len(order), dtype=bool)
    if sampling.top_k > 0:
        keep[sampling.top_k :] = False
    probs = _softmax(raw[order])
    if sampling.typical_p < 1.0:
        keep &= _typical_mask(probs, keep, sampling.typical_p)
    if sampling.top_p < 1.0:
        kept = np.where(keep, probs, 0.0)
        kept /= kept.sum()
        cumulative = np.cumsum(kept)
        # keep the smallest prefix whose mass reaches top_p (at least one token)
        cut = int(np.searchsorted(cumulative, sampling.top_p)) + 1
        keep[cut:] = False
    if sampling.min_p > 0:
        keep &= probs >= sampling.min_p * probs[0]
        keep[0] = True
    scaled = np.where(keep, raw[order] / sampling.temperature, -np.inf)
    result = np.zeros_like(raw)
    result[order] = _softmax(scaled)
    return result


def _typical_mask(
    probs: npt.NDArray[np.float64], keep: npt.NDArray[np.bool_], typical_p: float
) -> npt.NDArray[np.bool_]:
    kept = np.where(keep, probs, 0.0)
    kept /= kept.sum()
    with np.errstate(divide="ignore"):
        surprise = -np.log(np.where(kept > 0, kept, 1.0))
    entropy = float((kept * surprise).sum())
    distance = np.where(keep, np.abs(surprise - entropy), np.inf)
    by_distance = np.argsort(distance)
    cumulative = np.cumsum(kept[by_distance])
    count = int(np.searchsorted(cumulative, typical_p)) + 1
    mask = np.zeros_like(keep)
    mask[by_distance[:count]] = True
    return mask


class ProbabilityRecorder:
    """A `logits_processor` that keeps the current step's logits, and turns
    them into a `TokenChoice` once the token is known."""

    def __init__(self, sampling: SamplingSettings, token_text: Callable[[int], str]) -> None:
        self._sampling = sampling
        self._token_text = token_text
        self._logits: Logits | None = None

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: Logits) -> Logits:
        self._logits = np.array(scores, dtype=np.float32, copy=True)
        return scores

    def choice(self, token_id: int, text: str) -> TokenChoice | None:
        logits = self._logits
        if logits is None or token_id >= len(logits):
            return None
        raw = _softmax(logits.astype(np.float64))
        sampled = sampled_distribution(logits, self._sampling)
        return TokenChoice(
            token_id=token_id,
            text=text,
            prob=float(sampled[token_id]),
            raw_prob=float(raw[token_id]),
            top=self._top(sampled),
            raw_top=self._top(raw),
            greedy=token_id == int(logits.argmax()),
        )

    def _top(self, probs: npt.NDArray[np.float64]) -> list[tuple[str, float]]:
        best = np.argpartition(-probs, TOP_N)[:TOP_N]
        best = best[np.argsort(-probs[best])]
        return [(self._token_text(int(i)), float(probs[i])) for i in best if probs[i] > 0]
