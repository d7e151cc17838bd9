"""What the model could have said: the distribution behind each sampled token.

After a token is sampled, llama.cpp's logits buffer still holds that step's
logits (no `logits_all`, which would keep n_ctx x vocabulary floats): the step
is summarised from it, the chosen token's probability and the top alternatives,
both in the raw model distribution and after the sampling settings (top-k,
typical-p, top-p, min-p, then temperature, in llama.cpp's order). Repetition
penalties are not replayed: they depend on llama.cpp's own history.

This runs once per token, so it must cost little next to a decode step:
`step_distribution` works over the few tokens that can be kept rather than the
whole vocabulary; `sampled_distribution` is the plain whole-vocabulary
definition it is tested against."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import numpy.typing as npt

from chat.conversations.conversation import TokenChoice
from chat.settings.schema import SamplingSettings
from chat.thread_names import name_this_thread

TOP_N = 5
Logits = npt.NDArray[np.float32]


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


# Candidate sets are first looked for among the tokens whose logit is within
# GAP of the best one (one comparison over the vocabulary); a wider gap, then
# the whole vocabulary, only when that set cannot hold every token needed.
_GAPS = (4.0, 8.0, 16.0)


def _by_logit(logits: Logits, ids: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """`ids` (ascending) ordered by logit, largest first; ties keep the lower id
    first, as argmax does."""
    return ids[np.argsort(-logits[ids], kind="stable")]


def _largest(logits: Logits, ids: npt.NDArray[np.intp], k: int) -> npt.NDArray[np.intp]:
    """The k ids of `ids` with the largest logits, largest first."""
    if len(ids) > k:
        ids = np.sort(ids[np.argpartition(-logits[ids], k - 1)[:k]])
    return _by_logit(logits, ids)


def _near_top(logits: Logits, best: float, at_least: int) -> npt.NDArray[np.intp]:
    """Ascending ids within the smallest gap of the best logit that holds
    `at_least` tokens, or every id."""
    # Real models put a handful of tokens within 4 of the best logit and tens
    # within 8: a top_k of 40 would nearly always need the second try.
    for gap in _GAPS if at_least <= TOP_N else _GAPS[1:]:
        ids = np.flatnonzero(logits >= best - gap)
        if len(ids) >= at_least:
            return ids
    return np.arange(len(logits))


@dataclass(frozen=True)
class StepDistribution:
    """One step, reduced to what a `TokenChoice` shows."""

    prob: float
    """The chosen token's probability after the sampling settings."""
    raw_prob: float
    top: list[tuple[int, float]]
    """The most likely tokens after the sampling settings (none with probability 0)."""
    raw_top: list[tuple[int, float]]
    argmax: int


def step_distribution(
    logits: Logits, token_id: int, sampling: SamplingSettings, scratch: Logits | None = None
) -> StepDistribution:
    """`sampled_distribution` and the raw softmax, reduced to the chosen token
    and the top TOP_N of each, without sorting the vocabulary or computing in
    float64 over it.

    The raw distribution takes one pass (max, exp, sum in float32). The sampled
    one is computed over a candidate set that provably holds every kept token:
    the top_k tokens, or (top_k off) the head of the vocabulary by logit down to
    where top_p's mass is reached or min_p's threshold cuts off. Only typical_p
    without top_k falls back to the whole-vocabulary computation.

    `scratch`, an array shaped like `logits`, spares allocating one per step.
    """
    n = len(logits)
    argmax = int(logits.argmax())
    best = float(logits[argmax])
    if scratch is None or scratch.shape != logits.shape:
        scratch = np.empty(logits.shape, dtype=np.float32)
    exps = np.subtract(logits, best, out=scratch, dtype=np.float32, casting="same_kind")
    np.exp(exps, out=exps)
    total = float(exps.sum())
    shown = min(TOP_N, n)
    top_k = sampling.top_k if 0 < sampling.top_k < n else 0
    temperature = sampling.temperature

    def raw(ids: npt.NDArray[np.intp]) -> list[tuple[int, float]]:
        return [(int(i), float(exps[i]) / total) for i in ids[:shown]]

    head = _largest(logits, _near_top(logits, best, max(top_k, shown)), max(top_k, shown))
    raw_prob = float(exps[token_id]) / total
    if temperature <= 0:
        prob = 1.0 if token_id == argmax else 0.0
        return StepDistribution(prob, raw_prob, [(argmax, 1.0)], raw(head), argmax)

    if not (top_k or sampling.top_p < 1 or sampling.min_p > 0 or sampling.typical_p < 1):
        # Every token is kept: temperature alone reshapes the distribution.
        scaled = np.exp((logits - best) / temperature)
        scaled_total = float(scaled.sum())
        top = [(int(i), float(scaled[i]) / scaled_total) for i in head[:shown]]
        return StepDistribution(
            float(scaled[token_id]) / scaled_total, raw_prob, top, raw(head), argmax
        )

    if top_k:
        candidates = head[:top_k]
    elif sampling.typical_p < 1:
        full = sampled_distribution(logits, sampling)
        top_ids = _largest(logits, np.flatnonzero(full > 0), shown)
        top = [(int(i), float(full[i])) for i in top_ids]
        return StepDistribution(float(full[token_id]), raw_prob, top, raw(head), argmax)
    else:
        candidates = _head_of_vocabulary(logits, best, exps, total, shown, sampling)

    probs = exps[candidates].astype(np.float64) / total
    keep = np.ones(len(candidates), dtype=bool)
    if sampling.typical_p < 1:
        keep &= _typical_mask(probs, keep, sampling.typical_p)
    if sampling.top_p < 1:
        kept = np.where(keep, probs, 0.0)
        # With top_k, top_p renormalizes over the top_k tokens; without it the
        # candidates are a prefix of the whole vocabulary, already normalized.
        if top_k:
            kept /= kept.sum()
        cut = int(np.searchsorted(np.cumsum(kept), sampling.top_p)) + 1
        keep[cut:] = False
    if sampling.min_p > 0:
        keep &= probs >= sampling.min_p * probs[0]
        keep[0] = True
    kept_ids = candidates[keep]
    sampled = _softmax(logits[kept_ids].astype(np.float64) / temperature)
    where = np.flatnonzero(kept_ids == token_id)
    prob = float(sampled[where[0]]) if len(where) else 0.0
    top = [(int(i), float(p)) for i, p in zip(kept_ids[:shown], sampled[:shown], strict=True)]
    return StepDistribution(prob, raw_prob, top, raw(head), argmax)


def _head_of_vocabulary(
    logits: Logits,
    best: float,
    exps: Logits,
    total: float,
    at_least: int,
    sampling: SamplingSettings,
) -> npt.NDArray[np.intp]:
    """Without top_k, the tokens top_p and min_p keep are a prefix of the
    vocabulary ordered by logit: that prefix ends within the first gap that
    holds top_p's mass, or that is wider than min_p's threshold (min_p keeps
    logits >= best + log(min_p)). Returns it ordered, largest first."""
    min_p_gap = -float(np.log(sampling.min_p)) if sampling.min_p > 0 else np.inf
    for gap in _GAPS:
        ids = np.flatnonzero(logits >= best - gap)
        if len(ids) == len(logits):
            break
        if len(ids) >= at_least and (
            gap > min_p_gap
            or (sampling.top_p < 1 and float(exps[ids].sum()) / total >= sampling.top_p)
        ):
            return _by_logit(logits, ids)
    return _by_logit(logits, np.arange(len(logits)))


class ProbabilityRecorder:
    """Turns one step's logits into a `TokenChoice` once its token is known.

    The engine passes llama.cpp's logits buffer of that step (a view, no copy):
    it stays as it is until the next token is evaluated. Nothing is added to
    llama.cpp's sampler chain, so recording cannot change what is sampled.
    """

    def __init__(self, sampling: SamplingSettings, token_text: Callable[[int], str]) -> None:
        self._sampling = sampling
        self._token_text = token_text
        self._scratch: Logits | None = None

    def choice(self, logits: Logits, token_id: int, text: str) -> TokenChoice | None:
        if not 0 <= token_id < len(logits):
            return None
        if self._scratch is None or self._scratch.shape != logits.shape:
            self._scratch = np.empty(logits.shape, dtype=np.float32)
        step = step_distribution(logits, token_id, self._sampling, self._scratch)
        texts = self._token_text
        return TokenChoice(
            token_id=token_id,
            text=text,
            prob=step.prob,
            raw_prob=step.raw_prob,
            top=[(texts(i), p) for i, p in step.top if p > 0],
            raw_top=[(texts(i), p) for i, p in step.raw_top],
            greedy=token_id == step.argmax,
        )


WORKER_NAME = b"kvchat-probs"
"""The summarising thread's name, as Python and the kernel know it
(/proc/PID/task/TID/comm): the benchmark counts its CPU as the engine's, not
the UI's, and the program's exit waits for it like any `kvchat-` thread."""


_Step = tuple[Logits, int, str]
_Batch = list["_Step | TokenChoice"]


class StepRecorder:
    """Records a reply's steps away from the thread that decodes it: each step's
    logits are copied (a few microseconds for a 49,152-token vocabulary) and
    summarised on a thread of the reply's own while llama.cpp evaluates the
    next tokens. On the decode thread the summary took about 0.4 ms of each
    14 ms token (docs/performance.md), a cost every token paid in decode speed.
    The thread is handed the steps `BATCH` at a time, so that it wakes a few
    times a second, not at every token: where llama.cpp's threads take every
    core, each wake takes a core from them and stalls their team, and the
    thread's Python takes the GIL while the decode thread wants it back
    (docs/performance.md, "The token probabilities wake their thread once
    for 16 tokens").
    `choices()` gives them in order once the reply has ended; leaving the
    `with` block drops what is not summarised yet (a reply cut short) and ends
    the thread: nothing reads the model after the reply lets go of it (it may
    be closed next)."""

    BATCH = 16
    """Steps handed to the thread together (the last ones of a reply at its end).
    Their copies are held meanwhile: about 32 of them while the thread keeps
    up (6 MB for the demo model's 49,152-token vocabulary, 32 MB for a
    262,144-token one), at most `PENDING` and a batch while it falls behind."""

    PENDING = 64
    """Steps the thread may be behind; beyond that the decode thread waits for
    it (a machine too busy to summarise as fast as it decodes)."""

    def __init__(self, sampling: SamplingSettings, token_text: Callable[[int], str]) -> None:
        self._recorder = ProbabilityRecorder(sampling, token_text)
        self._inbox: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._batch: _Batch = []
        """Steps not handed to the thread yet (touched by the decode thread only)."""
        self._room = threading.Semaphore(self.PENDING)
        self._done: list[TokenChoice] = []
        """The summaries so far, in order (appended by the thread)."""
        self._spare: list[Logits] = []
        """Copies the thread is done with, for the next steps (appended by the
        thread, taken by the decode thread: list operations are atomic)."""
        self._dropping = False
        self._error: Exception | None = None
        """What went wrong summarising, raised by `choices()` (the reply's end)."""
        self._thread: threading.Thread | None = None

    def record(self, logits: Logits, token_id: int, text: str) -> None:
        """A sampled step: `logits` (llama.cpp's buffer, valid until the next
        token is evaluated) are copied and summarised in the background."""
        try:
            copy = self._spare.pop()
        except IndexError:
            copy = np.empty_like(logits)
        np.copyto(copy, logits)
        self._send((copy, token_id, text))

    def add(self, choice: TokenChoice) -> None:
        """A step known at once (a token written by kvchat, not sampled)."""
        self._send(choice)

    def _send(self, step: _Step | TokenChoice) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._summarise, name=WORKER_NAME.decode(), daemon=True
            )
            self._thread.start()
        self._room.acquire()
        self._batch.append(step)
        if len(self._batch) >= self.BATCH:
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch = self._batch, []
        self._inbox.put(batch)

    def _summarise(self) -> None:
        name_this_thread(WORKER_NAME.decode())
        while (batch := self._inbox.get()) is not None:
            for step in batch:
                self._summarise_step(step)

    def _summarise_step(self, step: _Step | TokenChoice) -> None:
        try:
            if isinstance(step, TokenChoice):
                self._done.append(step)
            elif not self._dropping and self._error is None:
                logits, token_id, text = step
                choice = self._recorder.choice(logits, token_id, text)
                if choice is not None:
                    self._done.append(choice)
                self._spare.append(logits)
        except Exception as error:  # the thread goes on, so the decode never waits on it
            self._error = error
        finally:
            self._room.release()

    def _end(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            if self._batch:
                self._hand_over()
            self._inbox.put(None)
            self._thread.join()

    def choices(self) -> list[TokenChoice]:
        """Every step's summary, in order (waits for the thread to catch up)."""
        self._end()
        if self._error is not None:
            raise self._error
        return list(self._done)

    def __enter__(self) -> StepRecorder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._dropping = True  # the steps not summarised yet are skipped
        self._end()
