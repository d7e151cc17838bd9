"""The prompt batches an engine evaluated into the KV cache, and the span
of a prompt to evaluate next.

A span is `(start, end)`: token positions in the KV cache. Batches matter
because llama.cpp's logits depend on how tokens were batched (see
`PromptBatches.span`); keeping where each batch began and ended lets a prompt
be evaluated again in the same batches. No llama_cpp here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence

Span = tuple[int, int]


def cut_spans(spans: Iterable[Span], end: int) -> list[Span]:
    """The parts of batch `spans` before `end`, where the KV cache is cut."""
    return [(start, min(stop, end)) for start, stop in spans if start < end]


def chunks(start: int, end: int, size: int) -> Iterator[Span]:
    """[start, end) cut into batches of `size`, none of a single token unless
    the whole span is one (see `PromptBatches.span`)."""
    first = start
    while first < end:
        last = _batch_end(first, end, size)
        yield first, last
        first = last


def _batch_end(first: int, end: int, size: int) -> int:
    """Where a batch of at most `size` from `first` ends in [first, end): it
    leaves two tokens for the last batch, never one."""
    last = min(end, first + size)
    return last - 1 if end - last == 1 else last


def timed_chunks(
    start: int,
    end: int,
    seconds: float,
    most: int,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[Span]:
    """[start, end) cut into batches that take about `seconds` each, sized by
    how fast the batches before went (the consumer evaluates each batch before
    asking for the next): work that anything else waits for one batch of
    stays short on a busy or slow machine. The first batch is `TIMED_FIRST`
    tokens; none is over `most`, and with `most` of 3 or more none is of a
    single token."""
    size = min(most, TIMED_FIRST)
    first = start
    while first < end:
        last = _batch_end(first, end, size)
        began = clock()
        yield first, last
        took = clock() - began
        if took > 0:
            size = round(seconds * (last - first) / took)
        size = max(min(TIMED_LEAST, most), min(most, size))
        first = last


TIMED_FIRST = 4
"""`timed_chunks`' first batch, before any rate is known: a tenth of a second
at 40 tokens a second, about what a 2-core machine evaluates of a 7B model."""

TIMED_LEAST = 4
"""`timed_chunks`' smallest batch (of 3 or more, a batch that leaves two tokens
for the last is still of two or more)."""


class PromptBatches:
    """Where the prompt batches evaluated so far begin and end in the KV cache."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def start(self, start: int, end: int) -> None:
        """The KV cache is cut at `start`, where the batch [start, end) goes."""
        self.spans = cut_spans(self.spans, start)
        self.spans.append((start, end))

    def end_early(self, start: int, reached: int) -> None:
        """The batch that began at `start` was evaluated only up to `reached`:
        that is what the KV cache holds of it."""
        self.spans.pop()
        if reached > start:
            self.spans.append((start, reached))

    def clear(self) -> None:
        self.spans.clear()

    def restore(self, spans: Sequence[Span], n_tokens: int) -> None:
        """The batches of a KV cache state loaded back, holding `n_tokens`."""
        self.spans = cut_spans(spans, n_tokens)

    def held(self, n_tokens: int) -> tuple[Span, ...]:
        """The batches a cache of `n_tokens` holds (what a saved state keeps)."""
        return tuple(cut_spans(self.spans, n_tokens))

    def built_end(self, n_tokens: int) -> int:
        """Where the KV cache (holding `n_tokens`) stops holding only what
        batches of two or more tokens evaluated (from its start): past it come
        tokens a reply sampled and evaluated one at a time. (A span of one
        token may be what is left of a longer batch: counted as not, which
        only costs a token.)"""
        built = 0
        for start, end in sorted(self.spans):
            if start > built or end - start < 2:
                break
            built = max(built, end)
        return min(built, n_tokens)

    def span(
        self, prompt_len: int, resume: int, n_cached: int, exact: bool, logits_live: bool
    ) -> Span:
        """The span of `prompt` to evaluate: where it starts is chosen so that
        the same prompt gives the same logits (and, with a fixed seed, the same
        reply) whatever the KV cache held before.

        llama.cpp's float sums depend on how tokens are batched: on the CPU a
        batch of one token is multiplied by other kernels (ggml's dot products)
        than a batch of two or more (llamafile's tinyBLAS), and the logits
        differ (docs/llama-cpp-facts.md). How a prompt is cut into batches
        of two or more makes no difference. So:

        - A reply's own tokens were evaluated one at a time as they were
          sampled: a conversation evaluated from scratch (just opened, or its
          saved state gone) holds other values for them. With `exact` (a
          repeatable reply: fixed seed or temperature 0) those are not reused;
          they are evaluated again, in batches, with the new message, unless
          `rebatch_reply` did it in the background already. And the prompt's
          own batch is at least two tokens: regenerating a reply finds its
          whole prompt cached, and `Llama.generate` would evaluate only the
          last token, alone. Then the reply is the same warm, restored, or
          from scratch.
        - Otherwise (a random seed: no two replies are meant to be the same)
          the cache is reused as far as it matches, except that a prompt
          resuming in the middle of a batch (regenerate, an edited last
          message, other text than was prefilled) evaluates that batch again
          from its start, as it was the first time.

        A prompt that is all cached and whose batch was the last thing
        evaluated (a prefill) needs nothing: llama.cpp still holds the logits
        of its last token.

        `resume`: how many of the prompt's tokens the KV cache (holding
        `n_cached`) holds already; `logits_live`: llama.cpp still holds the
        logits of the last token it evaluated (and can sample from them)."""
        if exact:
            resume = min(resume, self.built_end(n_cached))
        last_end = self.spans[-1][1] if self.spans else None
        if resume == prompt_len == n_cached == last_end and logits_live:
            return resume, resume
        if exact:
            # Never a batch of one token; where it starts makes no difference.
            return max(0, min(resume, prompt_len - 2)), prompt_len
        resume = min(resume, prompt_len - 1)  # the last token's logits are needed
        for start, end in self.spans:
            if start < resume < end:
                return start, prompt_len
        return resume, prompt_len
