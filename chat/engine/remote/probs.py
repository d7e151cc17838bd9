"""Token probabilities as servers report them, made into `TokenChoice`s.

Servers give the model's own log-probabilities of the chosen token and of the
top few alternatives (llama-server's `completion_probabilities`, OpenAI's and
vLLM's `logprobs`, Ollama's `logprobs`). That is the raw distribution; what the
sampling settings made of it is not reported, so `prob`/`top` repeat the raw
figures, except at temperature 0 where the choice was certain (as the local
engine records it). Texts are sanitized: they are shown in the token view.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from chat.conversations.conversation import TokenChoice
from chat.engine.token_probs import TOP_N
from chat.json_numbers import finite_number
from chat.sanitize import sanitize
from chat.settings.schema import SamplingSettings


def _prob(logprob: object) -> float:
    value = finite_number(logprob)  # not `true`, NaN or Infinity
    if value is None:
        return 0.0
    return min(1.0, math.exp(min(value, 0.0)))


def token_choice(
    token_id: int,
    text: str,
    logprob: object,
    top: Sequence[tuple[str, object]],
    sampling: SamplingSettings,
    greedy: bool | None = None,
) -> TokenChoice:
    """`top`: the alternatives as (text, logprob), likeliest first. `greedy`:
    whether the chosen token was the likeliest, when the server says by id;
    else judged by text and probability."""
    raw_prob = _prob(logprob)
    raw_top = [(sanitize(t), _prob(lp)) for t, lp in top[:TOP_N]]
    raw_top.sort(key=lambda pair: -pair[1])
    shown = sanitize(text)
    if greedy is None:
        greedy = not raw_top or (raw_top[0][0] == shown or raw_top[0][1] <= raw_prob)
    if sampling.temperature <= 0:
        prob, sampled_top = 1.0, [(shown, 1.0)]
    else:
        prob, sampled_top = raw_prob, list(raw_top)
    return TokenChoice(
        token_id=token_id,
        text=shown,
        prob=prob,
        raw_prob=raw_prob,
        top=sampled_top,
        raw_top=raw_top,
        greedy=greedy,
    )
