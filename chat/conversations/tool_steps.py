"""A tool turn's steps, kept with its reply (issue 30, point 7): the types
(defined with the other values of a chat, in chat.conversations.conversation)
and their stored form.

A turn that called tools stays one assistant message (one node of the
conversation's tree, so branches, regenerate, continue and fork treat it like
any reply). Its `content` is the final answer; before it, `Message.tool_steps`
holds what the model saw on the way, in order: each step is one intermediate
reply of the model (its text, its thinking, the tokens it was sampled as) and
the calls it made, each with what came of it (the result as the model read
it). Expanded again (chat.session.tool_history), the steps give the prompt the
model was sent, token for token.

Stored as JSON (`steps_json`, `steps_from_json`); what is read back, from the
database or an imported file, is checked field by field (`ToolStepsError`
says what is wrong), because a file is anyone's to edit. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from chat.conversations.conversation import (
    CALL_OUTCOMES,
    FINISH_REASONS,
    CallOutcome,
    FinishReason,
    ReplyStats,
    ToolCallRecord,
    ToolStep,
)
from chat.json_numbers import is_figure, is_finite_number, is_token_id, is_whole_number

__all__ = [
    "CALL_OUTCOMES",
    "CallOutcome",
    "ToolCallRecord",
    "ToolStep",
    "ToolStepsError",
    "search_text",
    "stats_dict",
    "stats_from_dict",
    "steps_data",
    "steps_from_data",
    "steps_from_json",
    "steps_json",
]

STORED_VERSION = 1
"""The version of the stored form (`steps_json`); a newer one is not read."""


class ToolStepsError(ValueError):
    """Stored tool steps that are not what kvchat writes; `str()` says where."""


def search_text(steps: Sequence[ToolStep]) -> str:
    """The text of the steps that search finds: what each reply said, and
    each call's tool, arguments and result (not the thinking, as for replies)."""
    lines: list[str] = []
    for step in steps:
        if step.content:
            lines.append(step.content)
        for call in step.calls:
            arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
            lines += [f"{call.name} {arguments}", call.result]
    return "\n".join(lines)


# -- to JSON and back


def stats_dict(stats: ReplyStats) -> dict[str, Any]:
    """A reply's stats as JSON keeps them (the exports' shape too)."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "prompt_evaluated": stats.prompt_evaluated,
        "generated_tokens": stats.generated_tokens,
        "ttft_s": stats.ttft_s,
        "decode_tps": stats.decode_tps,
        "finish_reason": stats.finish_reason,
        "seed": stats.seed,
        "total_s": stats.total_s,
        "thinking_tokens": stats.thinking_tokens,
        "first_answer_s": stats.first_answer_s,
    }


def steps_data(steps: Sequence[ToolStep]) -> list[dict[str, Any]]:
    """The steps as JSON values (a list, one object per step)."""
    return [_step_dict(step) for step in steps]


def _step_dict(step: ToolStep) -> dict[str, Any]:
    data: dict[str, Any] = {"content": step.content}
    if step.thinking:
        data["thinking"] = step.thinking
    if step.token_ids is not None:
        data["token_ids"] = list(step.token_ids)
    if step.stats is not None:
        data["stats"] = stats_dict(step.stats)
    if step.sent is not None:
        data["sent"] = step.sent
    data["calls"] = [
        {
            "id": call.id,
            "name": call.name,
            "arguments": dict(call.arguments),
            "server": call.server,
            "tool": call.tool,
            "outcome": call.outcome,
            "result": call.result,
            "is_error": call.is_error,
            "cut": call.cut,
            "result_tokens": call.result_tokens,
            "duration_s": call.duration_s,
        }
        for call in step.calls
    ]
    return data


def steps_json(steps: Sequence[ToolStep]) -> str | None:
    """The stored form of `steps` (None for none: the column stays NULL)."""
    if not steps:
        return None
    # Python's JSON (NaN and Infinity allowed), as the exports write stats:
    # an imported reply's figures are stored as they came.
    return json.dumps({"version": STORED_VERSION, "steps": steps_data(steps)}, ensure_ascii=False)


def steps_from_json(text: str | None) -> tuple[ToolStep, ...]:
    """`steps_json` read back, checked; raises `ToolStepsError`."""
    if text is None:
        return ()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ToolStepsError("the tool steps are not JSON") from None
    if not isinstance(data, dict):
        raise ToolStepsError("the tool steps are not an object")
    version = data.get("version")
    if isinstance(version, bool) or not (
        isinstance(version, int) and 1 <= version <= STORED_VERSION
    ):
        raise ToolStepsError(f"the tool steps have version {version!r}, not one this kvchat reads")
    return steps_from_data(data.get("steps"))


def steps_from_data(data: object) -> tuple[ToolStep, ...]:
    """`steps_data` read back (from a file: nothing is trusted); raises
    `ToolStepsError`, which names the step and the call."""
    if not isinstance(data, list):
        raise ToolStepsError("the tool steps are not a list")
    return tuple(_step(number, item) for number, item in enumerate(data, start=1))


def _step(number: int, item: object) -> ToolStep:
    where = f"tool step {number}"
    if not isinstance(item, dict):
        raise ToolStepsError(f"{where} is not an object")
    content = _string(item, "content", where)
    thinking = _string(item, "thinking", where, "")
    token_ids = item.get("token_ids")
    if token_ids is not None and not (
        isinstance(token_ids, list) and all(is_token_id(token) for token in token_ids)
    ):
        raise ToolStepsError(f'{where} has "token_ids" that are not a list of token ids')
    stats = item.get("stats")
    sent = item.get("sent")
    if sent is not None and not isinstance(sent, str):
        raise ToolStepsError(f'{where} has a "sent" that is not text')
    calls = item.get("calls")
    if not isinstance(calls, list):
        raise ToolStepsError(f'{where} has no "calls" list')
    return ToolStep(
        content=content,
        calls=tuple(_call(f"{where}, call {n}", call) for n, call in enumerate(calls, start=1)),
        thinking=thinking,
        token_ids=None if token_ids is None else tuple(token_ids),
        stats=None if stats is None else stats_from_dict(stats, f"the stats of {where}"),
        sent=sent,
    )


def _call(where: str, item: object) -> ToolCallRecord:
    if not isinstance(item, dict):
        raise ToolStepsError(f"{where} is not an object")
    arguments = item.get("arguments")
    if not isinstance(arguments, dict):
        raise ToolStepsError(f'{where} has "arguments" that are not an object')
    outcome = item.get("outcome")
    if outcome not in CALL_OUTCOMES:
        raise ToolStepsError(
            f'{where} has an "outcome" that is not one of {", ".join(CALL_OUTCOMES)}'
        )
    result_tokens = item.get("result_tokens", 0)
    if not is_whole_number(result_tokens) or result_tokens < 0:
        raise ToolStepsError(f'{where} has a "result_tokens" that is not a whole number')
    duration = item.get("duration_s", 0.0)
    if not is_finite_number(duration) or duration < 0:
        raise ToolStepsError(f'{where} has a "duration_s" that is not a number of seconds')
    return ToolCallRecord(
        id=_string(item, "id", where),
        name=_string(item, "name", where),
        arguments=arguments,
        server=_string(item, "server", where, ""),
        tool=_string(item, "tool", where, ""),
        outcome=cast(CallOutcome, outcome),
        result=_string(item, "result", where),
        is_error=_flag(item, "is_error", where),
        cut=_flag(item, "cut", where),
        result_tokens=result_tokens,
        duration_s=float(duration),
    )


def stats_from_dict(value: object, where: str) -> ReplyStats:
    """`stats_dict` read back, checked (a step's, and an imported message's);
    raises `ToolStepsError`, whose text starts with `where` ("the stats of
    ...")."""
    if not isinstance(value, dict):
        raise ToolStepsError(f"{where} are not an object")
    for key in ("prompt_tokens", "prompt_evaluated", "generated_tokens"):
        if not is_whole_number(value.get(key)):
            raise ToolStepsError(f'{where} have no whole number "{key}"')
    for key in ("ttft_s", "decode_tps"):
        if not is_figure(value.get(key)):
            raise ToolStepsError(f'{where} have no number "{key}"')
    finish = value.get("finish_reason")
    if finish not in FINISH_REASONS:
        raise ToolStepsError(f'{where} have an unknown finish reason "{finish}"')
    seed = value.get("seed")
    if seed is not None and not is_whole_number(seed):
        raise ToolStepsError(f'{where} have a "seed" that is not a whole number')
    total = value.get("total_s", 0.0)
    if not is_figure(total):
        raise ToolStepsError(f'{where} have a "total_s" that is not a number')
    thinking_tokens = value.get("thinking_tokens", 0)
    generated = value["generated_tokens"]
    if not is_whole_number(thinking_tokens) or not 0 <= thinking_tokens <= generated:
        raise ToolStepsError(
            f'{where} have a "thinking_tokens" that is not a whole number of the tokens generated'
        )
    first_answer = value.get("first_answer_s")
    if first_answer is not None and not is_figure(first_answer):
        raise ToolStepsError(f'{where} have a "first_answer_s" that is not a number')
    return ReplyStats(
        prompt_tokens=value["prompt_tokens"],
        prompt_evaluated=value["prompt_evaluated"],
        generated_tokens=value["generated_tokens"],
        # Floats: a JSON integer of 300 digits is a figure, and no SQLite integer.
        ttft_s=float(value["ttft_s"]),
        decode_tps=float(value["decode_tps"]),
        finish_reason=cast(FinishReason, finish),
        seed=seed,
        total_s=float(total),
        thinking_tokens=thinking_tokens,
        first_answer_s=None if first_answer is None else float(first_answer),
    )


def _string(item: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise ToolStepsError(f'{where} has no text "{key}"')
    return value


def _flag(item: Mapping[str, Any], key: str, where: str) -> bool:
    value = item.get(key, False)
    if not isinstance(value, bool):
        raise ToolStepsError(f'{where} has an "{key}" that is not true or false')
    return value
