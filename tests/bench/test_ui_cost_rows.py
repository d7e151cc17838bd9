"""The UI-cost rows beyond the first reply (chat.bench.ui_cost): the 40th
reply's ratio to the first, the code block's cost with its ratio to prose,
and the earlier turns the 40th reply is measured after."""

from __future__ import annotations

import json

from chat.bench.terminal import TerminalReply
from chat.bench.ui_cost import IMPORTED_TURNS, REPLY_NUMBER, code_row, depth_row, earlier_turns
from chat.conversations.transcript.json_import import parse_import


def reply(ui_cpu_s: float, text: str = "", prompt_tokens: int = 0) -> TerminalReply:
    """A 200-token reply that streamed for 10 s in 150 frames."""
    return TerminalReply(
        100.0, 200, ui_cpu_s, 2.0, 10.0, 500.0, 150, text=text, prompt_tokens=prompt_tokens
    )


def test_the_40th_reply_is_a_ratio_to_the_first() -> None:
    row = depth_row(0.10, reply(0.22, prompt_tokens=2100))
    assert row.name == "UI CPU at the 40th reply / the first"
    assert row.value is not None and abs(row.value - 1.1) < 1e-9
    assert row.unit == "x" and row.ok is True
    assert "0.11 CPU-s / 100 tok, 15 frames/s" in row.note
    assert f"{IMPORTED_TURNS} imported turns, a 2100-token prompt" in row.note
    assert depth_row(0.10, reply(0.26)).ok is False
    unmeasured = depth_row(0.0, reply(0.26))
    assert unmeasured.value is None and unmeasured.ok is None


def test_a_code_block_row_notes_its_ratio_to_prose_and_a_missing_fence() -> None:
    row = code_row(0.10, reply(0.30, "```python\nprint(1)\n```"))
    assert row.value is not None and abs(row.value - 0.15) < 1e-9
    assert row.ok is False and row.target == "<= 0.04"
    assert row.note == "1.5x prose, 15 frames/s, 200 tokens"
    assert code_row(0.10, reply(0.06, "no code")).note.endswith(
        "; the reply had no fenced code block"
    )
    assert code_row(0.10, reply(0.06, "```\n```")).ok is True


def test_the_earlier_turns_import_as_a_conversation_before_the_two_measured_replies() -> None:
    messages = earlier_turns()
    assert len(messages) == 2 * IMPORTED_TURNS == 2 * (REPLY_NUMBER - 2)
    conversation, _ = parse_import(json.dumps(messages))
    assert [m.role for m in conversation.messages][:2] == ["user", "assistant"]
    assert len(conversation.messages) == len(messages)
