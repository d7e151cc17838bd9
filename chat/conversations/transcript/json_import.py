"""A conversation read from JSON: kvchat's own export (the tree, or the
earlier one-branch format with per-message metadata), plain OpenAI-style files
and bare lists of messages. Nothing is trusted: every field is checked, and a
file that is not a conversation is an `ImportFormatError` that says why."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from chat.conversations.attachments import Attachment, display_name
from chat.conversations.conversation import (
    BACKENDS,
    LOCAL_BACKEND,
    ROLES,
    Conversation,
    Message,
    ReplyStats,
    Role,
)
from chat.conversations.tool_steps import (
    ToolCallRecord,
    ToolStep,
    ToolStepsError,
    stats_from_dict,
    steps_from_data,
)
from chat.conversations.tool_switches import switches_from_data
from chat.conversations.transcript.json_export import FORMAT_VERSION
from chat.conversations.tree import MessageTree
from chat.errors import KvchatError
from chat.json_numbers import is_time, is_token_id, is_whole_number
from chat.safe_files import UnsafeFileError, read_bytes, refusal_detail
from chat.settings.schema import URL_PATTERN
from chat.settings.server import public_url

MAX_IMPORT_BYTES = 20_000_000
"""Larger files are refused before being read: a chat this big is surely a mistake."""


class ImportFormatError(KvchatError):
    """A file to import is unreadable or not a conversation."""

    def __init__(self, detail: str, source: str | None = None) -> None:
        self.detail = detail
        self.source = source
        where = source if source is not None else "this conversation"
        super().__init__(f"Cannot import {where}: {detail}.")


THINKING_FIELDS = ("reasoning_content", "reasoning", "thinking")
"""Where a reply's thinking may be, first found first: `reasoning_content`
(kvchat's files, llama-server, DeepSeek's API, vLLM before 0.10), `reasoning`
(vLLM since), `thinking` (Ollama)."""


def _parse_thinking(number: int, item: dict[str, Any]) -> str:
    """A reply's thinking, apart from its `content` (the answer); "" when none."""
    for key in THINKING_FIELDS:
        value = item.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ImportFormatError(f'message {number}\'s "{key}" is not a string')
        # Servers send the newline the block opened with (see docs/reasoning.md).
        if value.strip():
            return value.lstrip()
    return ""


def _parse_message(number: int, item: object) -> Message:
    if not isinstance(item, dict):
        raise ImportFormatError(f"message {number} is not an object")
    if "role" not in item:
        raise ImportFormatError(f'message {number} has no "role"')
    role = item["role"]
    if role not in ROLES:
        known = ", ".join(ROLES)
        raise ImportFormatError(f'message {number} has unknown role "{role}" (known: {known})')
    if "content" not in item:
        raise ImportFormatError(f'message {number} has no "content"')
    if not isinstance(item["content"], str):
        raise ImportFormatError(f"message {number}'s content is not a string")
    thinking = _parse_thinking(number, item) if role == "assistant" else ""
    return Message(role=cast(Role, role), content=item["content"], thinking=thinking)


def _list_messages(items: list[Any]) -> list[Message]:
    """OpenAI-style messages, each tool turn (replies with `tool_calls`, the
    `tool` results, the answer) made one reply with its steps, as kvchat
    keeps it (`Message.tool_steps`)."""
    messages: list[Message] = []
    turn: _ToolTurn | None = None
    for number, item in enumerate(items, start=1):
        role = item.get("role") if isinstance(item, dict) else None
        if role == "tool":
            if turn is None:
                raise ImportFormatError(f"message {number} is a tool result that follows no call")
            turn.add_result(number, item)
            continue
        if role == "assistant" and item.get("tool_calls"):
            turn = turn or _ToolTurn()
            turn.add_reply(number, item)
            continue
        message = _parse_message(number, item)
        if turn is not None:
            if message.role == "assistant":
                message.tool_steps = turn.steps()
            else:
                # The turn ended with a result (stopped): no answer after it.
                messages.append(Message("assistant", "", tool_steps=turn.steps()))
            turn = None
        messages.append(message)
    if turn is not None:
        messages.append(Message("assistant", "", tool_steps=turn.steps()))
    return messages


class _ToolTurn:
    """A tool turn being read from OpenAI-style messages: its steps so far,
    and the calls still without a result (read as cancelled if none comes)."""

    def __init__(self) -> None:
        self._steps: list[tuple[dict[str, Any], list[ToolCallRecord]]] = []

    def add_reply(self, number: int, item: dict[str, Any]) -> None:
        content = item.get("content")
        if content is not None and not isinstance(content, str):
            raise ImportFormatError(f"message {number}'s content is not a string")
        calls = item["tool_calls"]
        if not isinstance(calls, list):
            raise ImportFormatError(f'message {number} has "tool_calls" that are not a list')
        reply = {"content": content or "", "thinking": _parse_thinking(number, item)}
        records = [_parse_call(number, index, call) for index, call in enumerate(calls, 1)]
        self._steps.append((reply, records))

    def add_result(self, number: int, item: dict[str, Any]) -> None:
        content = item.get("content")
        if content is not None and not isinstance(content, str):
            raise ImportFormatError(f"message {number}'s content is not a string")
        call_id = item.get("tool_call_id")
        waiting = [
            (records, index)
            for _, records in self._steps
            for index, record in enumerate(records)
            if record.outcome == "cancelled" and record.result == ""
        ]
        # The call it answers by its id; without one (some servers send
        # none), the first call still waiting.
        found = [(r, i) for r, i in waiting if call_id is None or r[i].id == call_id]
        if not found:
            raise ImportFormatError(
                f"message {number} is a tool result for no call waiting for one ({call_id!r})"
            )
        records, index = found[0]
        records[index] = replace(records[index], outcome="ran", result=content or "")

    def steps(self) -> tuple[ToolStep, ...]:
        return tuple(
            ToolStep(reply["content"], tuple(records), reply["thinking"])
            for reply, records in self._steps
        )


def _parse_call(number: int, index: int, call: object) -> ToolCallRecord:
    """One entry of an assistant message's `tool_calls` (OpenAI's shape: the
    arguments a JSON string, or an object as chat templates take them)."""
    where = f"call {index} of message {number}"
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        raise ImportFormatError(f'{where} is not an object with a "function"')
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where} names no tool")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise ImportFormatError(f"the arguments of {where} are not JSON") from None
    if not isinstance(arguments, dict):
        raise ImportFormatError(f"the arguments of {where} are not an object")
    call_id = call.get("id")
    if call_id is None:
        call_id = f"{number:05d}{index:04d}"  # nine digits: every template takes that
    if not isinstance(call_id, str):
        raise ImportFormatError(f'{where} has an "id" that is not a string')
    # No result yet: read as cancelled unless a `tool` message answers it.
    return ToolCallRecord(call_id, name, arguments, "", name, "cancelled", "")


def _parse_tool_steps(number: int, value: object) -> tuple[ToolStep, ...]:
    if value is None:
        return ()
    try:
        return steps_from_data(value)
    except ToolStepsError as error:
        raise ImportFormatError(f"message {number}: {error}") from None


def _parse_stats(number: int, value: object) -> ReplyStats | None:
    if value is None:
        return None
    try:
        return stats_from_dict(value, f"the stats of message {number}")
    except ToolStepsError as error:
        raise ImportFormatError(str(error)) from None


def _apply_message_meta(messages: list[Message], meta: object, first_number: int) -> None:
    """Copy per-message times, token counts and stats from the "kvchat" object."""
    if not isinstance(meta, list):
        raise ImportFormatError('"kvchat.messages" is not a list')
    if len(meta) != len(messages):
        raise ImportFormatError(
            f'"kvchat.messages" has {len(meta)} entries for {len(messages)} messages; '
            'remove the "kvchat" object to import the messages without their metadata'
        )
    for offset, (message, entry) in enumerate(zip(messages, meta, strict=True)):
        number = first_number + offset
        if not isinstance(entry, dict):
            raise ImportFormatError(
                f'"kvchat.messages" entry for message {number} is not an object'
            )
        _apply_entry(message, entry, number)


def _apply_entry(message: Message, entry: dict[str, Any], number: int) -> None:
    """A message's time, token count, stats and state from its kvchat metadata."""
    created = entry.get("created")
    if created is not None:
        if not is_time(created):
            raise ImportFormatError(f'message {number} has a "created" that is not a time')
        message.created = float(created)
    token_count = entry.get("token_count")
    if token_count is not None and not is_whole_number(token_count):
        raise ImportFormatError(f'message {number} has a "token_count" that is not a whole number')
    message.token_count = token_count
    message.stats = _parse_stats(number, entry.get("stats"))
    interrupted = entry.get("interrupted", False)
    if not isinstance(interrupted, bool):
        raise ImportFormatError(f'message {number} has an "interrupted" that is not true or false')
    message.state = "interrupted" if interrupted else "complete"


def _parse_token_ids(number: int, value: object) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(is_token_id(token) for token in value):
        raise ImportFormatError(
            f'message {number} has "token_ids" that are not a list of token ids'
        )
    return list(value)


def _parse_attachments(number: int, value: object) -> tuple[Attachment, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(item, dict)
        and isinstance(item.get("name"), str)
        and isinstance(item.get("text"), str)
        for item in value
    ):
        raise ImportFormatError(
            f'message {number} has "attachments" that are not a list of {{"name", "text"}}'
        )
    # The name is shown and sent: one line, no escape sequences, as when attached.
    return tuple(Attachment(display_name(item["name"]), item["text"]) for item in value)


def _parse_tree(entries: object, shown_key: object) -> tuple[MessageTree[Message], Message]:
    """The messages of "kvchat.tree" and the last message of the branch to show."""
    if not isinstance(entries, list):
        raise ImportFormatError('"kvchat.tree" is not a list')
    if not entries:
        raise ImportFormatError("it has no messages")
    tree: MessageTree[Message] = MessageTree()
    by_key: dict[int | str, Message] = {}
    for number, entry in enumerate(entries, start=1):
        message = _parse_message(number, entry)
        assert isinstance(entry, dict)  # checked by _parse_message
        key = entry.get("id")
        if not (is_whole_number(key) or isinstance(key, str)):
            raise ImportFormatError(f'message {number} has no "id" (a number or a string)')
        assert isinstance(key, (int, str))
        if key in by_key:
            raise ImportFormatError(f'message {number} has the "id" of an earlier one ({key})')
        parent_key = entry.get("parent")
        if parent_key is not None:
            if not (is_whole_number(parent_key) or isinstance(parent_key, str)):
                raise ImportFormatError(f'message {number} has a "parent" that is not an id')
            if parent_key not in by_key:
                raise ImportFormatError(
                    f'the "parent" of message {number} ({parent_key}) is not a message before it'
                )
            message.parent = by_key[parent_key]
        _apply_entry(message, entry, number)
        message.token_ids = _parse_token_ids(number, entry.get("token_ids"))
        message.attachments = _parse_attachments(number, entry.get("attachments"))
        message.tool_steps = _parse_tool_steps(number, entry.get("tool_steps"))
        by_key[key] = message
        tree.add(message)
    if shown_key is None:
        shown = tree.newest_leaf()
    elif (is_whole_number(shown_key) or isinstance(shown_key, str)) and shown_key in by_key:
        assert isinstance(shown_key, (int, str))
        shown = by_key[shown_key]
    else:
        raise ImportFormatError('"kvchat.shown" is not the id of a message in "kvchat.tree"')
    assert shown is not None
    return tree, tree.latest_leaf(shown)


def _meta_str(meta: dict[str, Any], key: str) -> str:
    value = meta.get(key, "")
    if not isinstance(value, str):
        raise ImportFormatError(f'"kvchat.{key}" is not a string')
    return value


def _meta_backend(meta: dict[str, Any]) -> tuple[str, str]:
    """ "kvchat.backend" and "kvchat.server_url", checked: absent (files from
    before model servers) means a local model. A URL keeps no user name,
    password or query."""
    backend = meta.get("backend", LOCAL_BACKEND)
    if backend not in BACKENDS:
        known = ", ".join(BACKENDS)
        raise ImportFormatError(f'"kvchat.backend" is not one of {known}')
    url = _meta_str(meta, "server_url").strip()
    if backend == LOCAL_BACKEND:
        if url:
            raise ImportFormatError('"kvchat.server_url" is set for a local model')
        return backend, ""
    if not re.fullmatch(URL_PATTERN, url) or not url.isprintable():
        raise ImportFormatError('"kvchat.server_url" is not an http:// or https:// URL')
    return backend, public_url(url)


def _meta_time(meta: dict[str, Any], key: str, default: float) -> float:
    value = meta.get(key, default)
    if not is_time(value):
        raise ImportFormatError(f'"kvchat.{key}" is not a time')
    return float(value)


def parse_import(text: str) -> tuple[Conversation, dict[str, Any]]:
    """A conversation (not yet stored) and its sampling settings, from JSON text.

    Accepts kvchat's own export (the tree, or one branch from kvchat before
    format 2), `{"messages": [...]}` from other tools, or a bare list of
    messages. In a list, a leading system message becomes the system prompt.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ImportFormatError(
            f"it is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise ImportFormatError("it is not valid JSON (nested too deeply)") from None

    meta: dict[str, Any] = {}
    if isinstance(data, list):
        items = data
    elif isinstance(data, dict) and "messages" in data:
        items = data["messages"]
        if not isinstance(items, list):
            raise ImportFormatError('"messages" is not a list')
        raw_meta = data.get("kvchat", {})
        if not isinstance(raw_meta, dict):
            raise ImportFormatError('"kvchat" is not an object')
        meta = raw_meta
    else:
        raise ImportFormatError('expected an object with a "messages" list, or a list of messages')
    version = meta.get("format", FORMAT_VERSION)
    if not is_whole_number(version):
        raise ImportFormatError('"kvchat.format" is not a whole number')
    if version > FORMAT_VERSION:
        raise ImportFormatError(
            f"it was written by a newer kvchat (format {version}; this version reads "
            f"up to {FORMAT_VERSION}); upgrade kvchat to import it"
        )
    tree = "tree" in meta  # kvchat's own file since format 2
    conv = _conversation_from_tree(meta) if tree else _conversation_from_list(items, meta)
    if not conv.title:
        conv.title = conv.default_title()
    # The tools turned off: absent (a file from before, or another tool's) or
    # damaged, every tool is on, as in a new conversation; the import goes on.
    conv.tool_switches = switches_from_data(meta.get("tools_off"))
    sampling = meta.get("sampling", {})
    if not isinstance(sampling, dict):
        raise ImportFormatError('"kvchat.sampling" is not an object')
    return conv, sampling


def _conversation_from_tree(meta: dict[str, Any]) -> Conversation:
    """kvchat's own file: every branch in "kvchat.tree" (the top-level "messages"
    are the branch shown, for other tools, and are not read again)."""
    tree, leaf = _parse_tree(meta["tree"], meta.get("shown"))
    backend, server_url = _meta_backend(meta)
    now = time.time()
    return Conversation(
        system_prompt=_meta_str(meta, "system_prompt"),
        messages=tree.path_to(leaf),
        title=_meta_str(meta, "title"),
        created=_meta_time(meta, "created", now),
        updated=_meta_time(meta, "updated", now),
        model_path=_meta_str(meta, "model_path"),
        model_name=_meta_str(meta, "model"),
        tree=tree,
        backend=backend,
        server_url=server_url,
        preset=_meta_str(meta, "preset"),
    )


def _conversation_from_list(items: list[Any], meta: dict[str, Any]) -> Conversation:
    """One branch: OpenAI-style messages, with kvchat's format-1 metadata if any."""
    if not items:
        raise ImportFormatError("it has no messages")
    messages = _list_messages(items)

    # kvchat's own files say what the system prompt is; others put it first.
    if "system_prompt" in meta:
        has_prompt = _meta_str(meta, "system_prompt") != ""
    else:
        has_prompt = messages[0].role == "system"
    if has_prompt and messages[0].role != "system":
        raise ImportFormatError(
            '"kvchat.system_prompt" is set but message 1 is not a system message'
        )
    system_prompt = messages.pop(0).content if has_prompt else ""
    backend, server_url = _meta_backend(meta)

    now = time.time()
    conv = Conversation(
        system_prompt=system_prompt,
        messages=messages,
        title=_meta_str(meta, "title"),
        created=_meta_time(meta, "created", now),
        updated=_meta_time(meta, "updated", now),
        model_path=_meta_str(meta, "model_path"),
        model_name=_meta_str(meta, "model"),
        backend=backend,
        server_url=server_url,
    )
    if "messages" in meta:
        _apply_message_meta(messages, meta["messages"], first_number=2 if system_prompt else 1)
    return conv


def _size_of(path: Path) -> int:
    """The file's size, 0 when only opening it can say what is wrong (a link loop)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise
    except OSError:
        return 0


def read_import_file(path: Path) -> tuple[Conversation, dict[str, Any]]:
    """`parse_import` of a file, refusing files over MAX_IMPORT_BYTES before reading."""
    limit_mb = MAX_IMPORT_BYTES // 1_000_000
    try:
        size = _size_of(path)
        if size > MAX_IMPORT_BYTES:
            raise ImportFormatError(
                f"it is {size / 1_000_000:.1f} MB and kvchat imports files up to {limit_mb} MB",
                source=str(path),
            )
        # A regular file only, opened without blocking (a FIFO, `/dev/stdin`,
        # `/dev/zero` are refused), read at most to the limit.
        data = read_bytes(path, MAX_IMPORT_BYTES, what="file")
    except UnsafeFileError as error:
        detail = refusal_detail(error, path, "file").rstrip(".")
        if detail.startswith("is larger than"):
            detail = f"it is larger than the {limit_mb} MB that kvchat imports"
        else:
            detail = f"it {detail}"
        raise ImportFormatError(detail, source=str(path)) from None
    except OSError as error:
        raise ImportFormatError(f"cannot read it ({error.strerror})", source=str(path)) from None
    try:
        text = data.decode("utf-8-sig")  # tolerate the BOM some Windows editors write
    except UnicodeDecodeError as error:
        raise ImportFormatError(
            f"it is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})",
            source=str(path),
        ) from None
    try:
        return parse_import(text)
    except ImportFormatError as error:
        raise ImportFormatError(error.detail, source=str(path)) from None
