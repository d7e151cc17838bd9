"""A conversation as Markdown, for people: a metadata header, then each
message under its role (the branch shown, or every branch in turn); a
reasoning model's thinking folded (`<details>`) before its answer."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chat.conversations.attachments import attachment_block
from chat.conversations.conversation import STATE_NOTES, Conversation, Message, ReplyStats
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
    return (
        f"{stats.generated_tokens} tokens · {stats.decode_tps:.1f} tokens/s · "
        f"first token {stats.ttft_s:.2f} s{answer} · prompt {stats.prompt_tokens} tokens "
        f"({stats.prompt_reused} reused) · {stats.finish_reason}"
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
    model_path = split_credentials(conv.model_path)[0]  # a server's, from older databases
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
        if message.thinking:
            lines += _thinking_fold(message)
        lines += [message.content, ""]
        for attachment in message.attachments:
            lines += [attachment_block(attachment), ""]
        if message.stats is not None:
            lines += [f"*{_stats_line(message.stats)}*", ""]
        if message.state != "complete":
            lines += [f"*{STATE_NOTES[message.state]}*", ""]
    return lines


def _thinking_fold(message: Message) -> list[str]:
    """The thinking, folded: a `<details>` block that renderers show closed,
    with the thinking quoted inside. The thinking is the model's, untrusted:
    it must not end the fold early or swallow the answer after it. Quoted, an
    unclosed code fence or list ends with the quote; and every `<` that could
    open markup is written `&lt;` (a `</details>`, a `<!--` that never ends, a
    `<script>`), which renders as `<` (in code it shows as written)."""
    summary = "Thinking"
    if message.stats is not None and message.stats.thinking_tokens:
        summary += f" · {message.stats.thinking_tokens} tokens"
    inert = _MARKUP_START.sub("&lt;", message.thinking.strip("\n"))
    quoted = [f"> {line}" if line.strip() else ">" for line in inert.split("\n")]
    return [f"<details><summary>{summary}</summary>", "", *quoted, "", "</details>", ""]
