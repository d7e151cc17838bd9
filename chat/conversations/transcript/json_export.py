"""A conversation as JSON: OpenAI-style messages (the branch shown) that other
tools read, plus a `"kvchat"` object with what only kvchat knows (title,
times, model or server, sampling settings, and the whole tree)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from chat.conversations.conversation import Conversation, Message, system_messages
from chat.conversations.tool_steps import ToolStep, stats_dict, steps_data
from chat.conversations.tool_switches import switches_data
from chat.settings.server import public_url, split_credentials

FORMAT_VERSION = 2
"""Version of the "kvchat" object in exported JSON; import refuses newer ones.
1: one branch (`"messages"` metadata); 2: the tree."""

_C1_AND_DEL = re.compile("[\x7f-\x9f]")


def _message_dicts(message: Message) -> list[dict[str, Any]]:
    """What the model was sent: a message's text, then its attached files; a
    reply's thinking as OpenAI-style APIs carry it (`reasoning_content`); a
    reply that called tools as its steps first, each an assistant message
    with `tool_calls` and a `tool` message per call (OpenAI's shape: the
    arguments as a JSON string), then its answer (if the turn got to one)."""
    sent = [message_dict for step in message.tool_steps for message_dict in _step_dicts(step)]
    if message.ends_in_answer:
        data = {"role": message.role, "content": message.prompt_content}
        if message.thinking:
            data["reasoning_content"] = message.thinking
        sent.append(data)
    return sent


def _step_dicts(step: ToolStep) -> list[dict[str, Any]]:
    reply: dict[str, Any] = {"role": "assistant", "content": step.content}
    if step.thinking:
        reply["reasoning_content"] = step.thinking
    reply["tool_calls"] = [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(dict(call.arguments), ensure_ascii=False),
            },
        }
        for call in step.calls
    ]
    results = [
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": call.result}
        for call in step.calls
    ]
    return [reply, *results]


def to_json(conv: Conversation, sampling: Mapping[str, Any]) -> str:
    """OpenAI-style messages (the branch shown) plus kvchat's metadata and the
    whole tree; `parse_import` reads it back."""
    conv.link_shown()
    # Ids of the file's own (1, 2, ... oldest first), not the database's: a
    # conversation exported, imported and exported again gives the same file.
    numbers = {id(message): number for number, message in enumerate(conv.tree, start=1)}
    shown = numbers[id(conv.messages[-1])] if conv.messages else None
    data: dict[str, Any] = {
        "messages": system_messages(conv.system_prompt)
        + [sent for m in conv.messages for sent in _message_dicts(m)],
        "kvchat": {
            "format": FORMAT_VERSION,
            "title": conv.title,
            "created": conv.created,
            "updated": conv.updated,
            "model": conv.model_name,
            "model_path": (
                "" if conv.made_on_server else split_credentials(conv.model_path)[0]
            ),  # a server's model has no file here
            # "local", or the kind of model server, with its URL (no key, no password).
            "backend": conv.backend,
            "server_url": public_url(conv.server_url) if conv.server_url else "",
            # Says whether messages[0] is the system prompt or a message of its own.
            "system_prompt": conv.system_prompt,
            "preset": conv.preset,
            "sampling": dict(sampling),
            # Every message of every branch, oldest first (a parent before its children).
            "tree": [_tree_entry(m, numbers) for m in conv.tree],
            "shown": shown,
        },
    }
    tools_off = switches_data(conv.tool_switches)
    if tools_off is not None:
        # Only when some are off: a file with every tool on is as before.
        data["kvchat"]["tools_off"] = tools_off
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    # json.dumps escapes C0 controls but writes DEL and C1 controls (U+009B is
    # a CSI to some terminals) as they are: escape them too. The text read back
    # is the same.
    return _C1_AND_DEL.sub(lambda match: f"\\u{ord(match[0]):04x}", text)


def _tree_entry(message: Message, numbers: dict[int, int]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": numbers[id(message)],
        "parent": None if message.parent is None else numbers[id(message.parent)],
        "role": message.role,
        "content": message.content,
        "created": message.created,
        "token_count": message.token_count,
        "stats": None if message.stats is None else stats_dict(message.stats),
        # Cut short: kvchat stopped while writing it, or another window was still
        # writing it when this was exported.
        "interrupted": message.state != "complete",
    }
    if message.thinking:
        entry["reasoning_content"] = message.thinking
    if message.token_ids is not None:
        entry["token_ids"] = message.token_ids
    if message.tool_steps:
        # kvchat's own record of each step (server, outcome, times, ...).
        entry["tool_steps"] = steps_data(message.tool_steps)
    if message.attachments:
        entry["attachments"] = [{"name": a.name, "text": a.text} for a in message.attachments]
    return entry
