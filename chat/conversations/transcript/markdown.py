"""A conversation as Markdown, for people: a metadata header, then each
message under its role (the branch shown, or every branch in turn); a
reasoning model's thinking folded (`<details>`) before its answer, and so is
each tool call of a reply, with its arguments and its result."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chat.conversations.attachments import attachment_block
from chat.conversations.conversation import (
    FINISH_WORDS,
    STATE_NOTES,
    Conversation,
    Message,
    ReplyStats,
)
from chat.conversations.tool_steps import ToolCallRecord
from chat.sanitize import show_controls
from chat.settings.server import public_url, split_credentials

# What the HTML parser would take for markup: a tag, an end tag, a comment or
# declaration (`<!`), a processing instruction (`<?`). Other `<` stay as they are.
_MARKUP_START = re.compile(r"<(?=[A-Za-z/!?])")


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def _stats_line(stats: ReplyStats) -> str:
    # A reply that thought first: its first answer token came later.
    answer = "" if stats.first_answer_s is None else f" · first answer {stats.first_answer_s:.2f} s"
    rate = f" · {stats.decode_tps:.1f} tokens/s" if stats.has_decode_rate else ""
    return (
        f"{stats.generated_tokens} tokens{rate} · "
        f"first token {stats.ttft_s:.2f} s{answer} · prompt {stats.prompt_tokens} tokens "
        f"({stats.prompt_reused} reused) · {FINISH_WORDS[stats.finish_reason]}"
    )


def to_markdown(
    conv: Conversation, sampling: Mapping[str, Any] | None = None, *, all_branches: bool = False
) -> str:
    """A transcript for people: a metadata header, then each message under its
    role: the branch shown, or with `all_branches` each branch in turn (every
    message from the first one down to a leaf, oldest leaf first)."""
    conv.link_shown()
    leaves = conv.tree.leaves()
    lines = [f"# {conv.title or conv.default_title()}", ""]
    # A server's conversation has no model file (older databases held its URL made a path).
    model_path = "" if conv.made_on_server else split_credentials(conv.model_path)[0]
    if conv.model_name or model_path:
        model = conv.model_name or Path(model_path).name
        lines.append(f"- **Model:** {model}" + (f" (`{model_path}`)" if model_path else ""))
    if conv.made_on_server:
        url = public_url(conv.server_url)
        lines.append(f"- **Server:** {conv.backend}" + (f" at {url}" if url else ""))
    lines.append(f"- **Created:** {_when(conv.created)}")
    lines.append(f"- **Updated:** {_when(conv.updated)}")
    if conv.preset:
        lines.append(f"- **Preset:** {conv.preset}")
    if sampling:
        settings = ", ".join(f"{key} = {value}" for key, value in sampling.items())
        lines.append(f"- **Sampling:** {settings}")
    if len(leaves) > 1:
        lines.append(
            f"- **Branches:** {len(leaves)}"
            + (" (all below)" if all_branches else " (the one last shown below)")
        )
    lines.append("")
    if conv.system_prompt:
        lines += ["## System prompt", "", conv.system_prompt, ""]
    if all_branches:
        shown = conv.messages[-1] if conv.messages else None
        for number, leaf in enumerate(leaves, start=1):
            mark = " (shown)" if leaf is shown else ""
            lines += [f"## Branch {number} of {len(leaves)}{mark}", ""]
            lines += _messages_markdown(conv.tree.path_to(leaf), "###")
    else:
        lines += _messages_markdown(conv.messages, "##")
    # Safe to print: a title, a message or a path from an imported file may hold
    # escape sequences (retitle the terminal, write the clipboard, clear it).
    return show_controls("\n".join(lines))


def _messages_markdown(messages: list[Message], heading: str) -> list[str]:
    lines: list[str] = []
    for message in messages:
        lines += [f"{heading} {message.role.capitalize()}", ""]
        for step in message.tool_steps:
            if step.thinking:
                lines += _fold(_thinking_summary(step.stats), step.thinking)
            if step.content:
                lines += [step.content, ""]
            for call in step.calls:
                lines += _call_fold(call)
        if message.thinking:
            lines += _fold(_thinking_summary(message.stats), message.thinking)
        lines += [message.content, ""]
        for attachment in message.attachments:
            lines += [attachment_block(attachment), ""]
        if message.stats is not None:
            lines += [f"*{_stats_line(message.stats)}*", ""]
        if message.state != "complete":
            lines += [f"*{STATE_NOTES[message.state]}*", ""]
    return lines


def _thinking_summary(stats: ReplyStats | None) -> str:
    if stats is not None and stats.thinking_tokens:
        return f"Thinking · {stats.thinking_tokens} tokens"
    return "Thinking"


def _call_fold(call: ToolCallRecord) -> list[str]:
    """A tool call, folded: a one-line summary (the tool, what came of it,
    its time, its result's size), the arguments and the result inside."""
    where = f"{call.server}.{call.tool}" if call.server else call.name
    parts = [f"Tool call: {where}", call.outcome + (", error" if call.is_error else "")]
    if call.duration_s:
        parts.append(f"{call.duration_s:.2f} s")
    if call.result_tokens:
        parts.append(f"{call.result_tokens} tokens" + (", cut" if call.cut else ""))
    arguments = json.dumps(dict(call.arguments), ensure_ascii=False, indent=2)
    text = f"Arguments:\n\n{arguments}\n\nResult:\n\n{call.result}"
    return _fold(" · ".join(parts), text)


def _fold(summary: str, text: str) -> list[str]:
    """`text` folded: a `<details>` block that renderers show closed, with
    the text quoted inside. The text is untrusted (the model's thinking, a
    tool's arguments and result, a tool's name in the summary): it must not
    end the fold early or swallow what follows. Quoted, an unclosed code
    fence or list ends with the quote; and every `<` that could open markup
    is written `&lt;` (a `</details>`, a `<!--` that never ends, a
    `<script>`), which renders as `<` (in code it shows as written)."""
    inert = _MARKUP_START.sub("&lt;", text.strip("\n"))
    quoted = [f"> {line}" if line.strip() else ">" for line in inert.split("\n")]
    title = _MARKUP_START.sub("&lt;", " ".join(summary.split()))
    return [f"<details><summary>{title}</summary>", "", *quoted, "", "</details>", ""]
