"""A tool turn kept, and sent again: the tool loop's outcome made the steps
a reply keeps (`tool_steps_of`) before its answer (`answer_of`), and a kept
reply made again the messages the model was sent (`chat_messages_of`), so
that a reopened conversation's next prompt is the one the model saw, token
for token, and the KV cache (or the saved KV state) that holds it is reused.

Pure functions, no Textual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chat.conversations.conversation import Message
from chat.conversations.tool_steps import ToolCallRecord, ToolStep
from chat.engine.protocol import Finished
from chat.session.tool_loop import CallRecord, ToolLoopOutcome


def tool_steps_of(
    outcome: ToolLoopOutcome, shown: Sequence[tuple[str, str]] = ()
) -> tuple[ToolStep, ...]:
    """The steps of a tool turn that called tools, in order: each reply
    that called, and its calls with their results. The reply after the last
    call (the answer, if the turn got that far) is not a step: it is the
    message's own `content`.

    `shown`: for each step that called, in order, its text and its thinking
    as the turn split them while they streamed (`ToolTurn.shown`); a step
    that thought keeps them apart, and the text the model was sent in `sent`
    (a local model's markers and thinking are in it), so that a reopened
    conversation shows the answer without markers and sends what the model
    saw."""
    steps = [step for step in outcome.steps if step.calls]
    kept = []
    for number, step in enumerate(steps):
        finished = step.finished
        text, thinking = shown[number] if number < len(shown) else (finished.text, "")
        sent = finished.text if thinking or text != finished.text else None
        kept.append(
            ToolStep(
                content=text,
                calls=tuple(_record(call) for call in step.calls),
                thinking=thinking,
                token_ids=finished.token_ids or None,
                stats=finished.stats,
                sent=sent,
            )
        )
    return tuple(kept)


def answer_of(outcome: ToolLoopOutcome) -> Finished | None:
    """The turn's answer, the reply after its last call (its text, figures
    and sampled tokens are the message's own); None when the turn ended with
    a call's result (stopped during a call, failed, or at its most steps)."""
    if outcome.steps and not outcome.steps[-1].calls:
        return outcome.steps[-1].finished
    return None


def _record(record: CallRecord) -> ToolCallRecord:
    return ToolCallRecord(
        id=record.call.id,
        name=record.call.name,
        arguments=dict(record.call.arguments),
        server=record.server,
        tool=record.tool,
        outcome=record.outcome,
        result=record.result,
        is_error=record.is_error,
        cut=record.cut,
        result_tokens=record.result_tokens,
        duration_s=record.duration_s,
    )


def chat_messages_of(message: Message, keep_thinking: bool = False) -> list[dict[str, Any]]:
    """What the model was sent of `message`: for a reply with tool steps,
    each step's reply with its `tool_calls` and each call's `tool` result,
    then the answer (none when the turn ended without one:
    `Message.ends_in_answer`); any other message as itself
    (`Message.as_chat_dict`)."""
    if not message.tool_steps:
        return [message.as_chat_dict(keep_thinking)]
    sent: list[dict[str, Any]] = []
    for step in message.tool_steps:
        sent.append(step.reply_message())
        sent += [call.result_message() for call in step.calls]
    if message.ends_in_answer:
        sent.append(message.as_chat_dict(keep_thinking))
    return sent
