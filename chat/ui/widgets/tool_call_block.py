"""A reply's tool steps, between its thinking and its answer: what each step
said before its calls, its figures, and a block per call.

A call's block is one line while folded ("▸ echo · sdk · {"text": "hi"} ·
0.12 s · result 3 tokens"); unfolded, the whole arguments and the whole
result follow. A click, or alt+c on the chat screen, folds and unfolds it.
The arguments are the model's and the result the server's: untrusted text,
drawn as `Content` after `chat.sanitize` (no markup, no escapes, no links).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from chat.conversations.conversation import ReplyStats
from chat.conversations.tool_steps import ToolStep
from chat.engine.tool_calls.calls import ToolCall
from chat.sanitize import sanitize, sanitize_line
from chat.session.tool_loop import CallRecord, PermissionRequest
from chat.ui.widgets.folded_block import FoldedBlock
from chat.wording import counted

SHORT_ARGUMENTS = 60
"""Characters of the arguments the folded line shows (then "…")."""

STATE_WORDS = {
    "asked": "waiting for your answer",
    "running": "running…",
    "refused": "refused",
    "failed": "failed",
    "cancelled": "cancelled",
}


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """A call's arguments whole, as indented JSON (the dialog shows them so too)."""
    return json.dumps(dict(arguments), indent=2, ensure_ascii=False)


def short_arguments(arguments: object) -> str:
    """The arguments on one line, cut with "…" past SHORT_ARGUMENTS."""
    text = sanitize_line(json.dumps(arguments, ensure_ascii=False))
    return text if len(text) <= SHORT_ARGUMENTS else text[: SHORT_ARGUMENTS - 1] + "…"


def step_figures(step: int, stats: ReplyStats) -> str:
    """`Step 1 · sent 209 · reused 0 · evaluated 209 · first token 0.31 s`."""
    return (
        f"Step {step} · sent {stats.prompt_tokens:,} · reused {stats.prompt_reused:,} · "
        f"evaluated {stats.prompt_evaluated:,} · first token {stats.ttft_s:.2f} s"
    )


class ToolCallBlock(FoldedBlock):
    DEFAULT_CSS = """
    ToolCallBlock {
        height: auto;
        color: $text-muted;
        padding: 0 0 0 0;
    }
    ToolCallBlock:hover {
        color: $text;
    }
    ToolCallBlock.-failed {
        color: $text-warning;
    }
    """

    def __init__(self, request: PermissionRequest, state: str) -> None:
        super().__init__("", markup=False)
        self.request = request
        self.state = state
        """"asked", "running", or the record's outcome once it ended."""
        self.record: CallRecord | None = None

    def update_state(self, state: str) -> None:
        self.state = state
        self._draw()

    def finish(self, record: CallRecord) -> None:
        self.record = record
        self.state = record.outcome
        self.set_class(record.outcome == "failed" or record.is_error, "-failed")
        self._draw()

    def summary(self) -> str:
        request = self.request
        parts = [
            sanitize_line(request.tool),
            sanitize_line(request.server),
            short_arguments(dict(request.arguments)),
        ]
        record = self.record
        if record is not None and record.outcome == "ran":
            parts.append(f"{record.duration_s:.2f} s")
            size = f"result {counted(record.result_tokens, 'token')}"
            if record.cut:
                size += " (cut)"
            if record.is_error:
                size += " (an error)"
            parts.append(size)
        else:
            parts.append(STATE_WORDS.get(self.state, self.state))
        return " · ".join(parts)

    def unfolded_text(self) -> str:
        """The arguments and the result, whole (sanitised)."""
        text = "Arguments:\n" + sanitize(arguments_text(self.request.arguments))
        if self.record is not None:
            text += "\nResult:\n" + sanitize(self.record.result)
        return text


def _step_lines(step: int, text: str, stats: ReplyStats | None) -> list[Static]:
    """What a step said before its calls (if anything), and its figures."""
    lines = []
    if text.strip():
        lines.append(Static(Content(sanitize(text.strip())), classes="tool-step-text"))
    if stats is not None:
        lines.append(Static(Content(step_figures(step, stats)), classes="tool-step-figures"))
    return lines


class ToolSteps(Vertical):
    """The steps of a tool turn, above the reply's answer."""

    DEFAULT_CSS = """
    ToolSteps {
        height: auto;
        padding: 0 0 1 0;
    }
    ToolSteps .tool-step-text {
        height: auto;
    }
    ToolSteps .tool-step-figures {
        height: auto;
        color: $text-muted;
    }
    """

    def __init__(self, kept: Sequence[ToolStep] = ()) -> None:
        """`kept`: a saved reply's steps, drawn as they were (all folded)."""
        super().__init__()
        self._blocks: dict[str, ToolCallBlock] = {}
        self._kept = tuple(kept)

    def compose(self) -> ComposeResult:
        for number, step in enumerate(self._kept, 1):
            yield from _step_lines(number, step.content, step.stats)
            for kept in step.calls:
                call = ToolCall(kept.name, kept.arguments, kept.id)
                request = PermissionRequest(kept.server, kept.tool, kept.arguments, call)
                block = ToolCallBlock(request, kept.outcome)
                block.finish(
                    CallRecord(
                        call,
                        kept.server,
                        kept.tool,
                        kept.outcome,
                        kept.result,
                        kept.duration_s,
                        kept.is_error,
                        kept.cut,
                        kept.result_tokens,
                    )
                )
                self._blocks[kept.id] = block
                yield block

    @property
    def blocks(self) -> list[ToolCallBlock]:
        return list(self._blocks.values())

    async def add_step(self, step: int, text: str, stats: ReplyStats) -> None:
        """A step that ended with calls: what it said before them, its figures."""
        await self.mount_all(_step_lines(step, text, stats))

    async def show_call(self, request: PermissionRequest, state: str) -> ToolCallBlock:
        """The call's block, mounted the first time, in `state`."""
        block = self._blocks.get(request.call.id)
        if block is None:
            block = ToolCallBlock(request, state)
            self._blocks[request.call.id] = block
            await self.mount(block)
        else:
            block.update_state(state)
        return block

    async def finish_call(self, record: CallRecord, request: PermissionRequest) -> None:
        block = await self.show_call(request, record.outcome)
        block.finish(record)
