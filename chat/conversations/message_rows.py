"""Rows of the conversation database and the values they stand for: a
message and its stats, attachments and token ids, a reply's state, and the
conversation's settings as stored (never a password in a URL)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, cast

from chat.conversations.attachments import Attachment
from chat.conversations.conversation import (
    BACKENDS,
    FINISH_REASONS,
    ROLES,
    FinishReason,
    Message,
    ReplyState,
    ReplyStats,
    Role,
    TokenChoice,
)
from chat.conversations.token_probs_codec import StoredTokenChoices, encode_token_probs
from chat.conversations.tool_steps import ToolStep, ToolStepsError, steps_from_json
from chat.conversations.tree import MessageTree
from chat.json_numbers import is_count, is_figure, is_time
from chat.settings.server import public_url, split_credentials

MESSAGE_COLUMNS = (
    "id, role, content, created, token_count, prompt_tokens, prompt_evaluated, "
    "generated_tokens, ttft_s, decode_tps, finish_reason, seed, total_s, token_probs, "
    "writer_pid, interrupted, token_ids, parent_id, thinking, thinking_tokens, first_answer_s, "
    "tool_steps, thought_open"
)

STATS_COLUMNS = (
    "prompt_tokens",
    "prompt_evaluated",
    "generated_tokens",
    "ttft_s",
    "decode_tps",
    "finish_reason",
    "seed",
    "total_s",
    "thinking_tokens",
    "first_answer_s",
)
"""The columns of a reply's stats, in the order of `stats_values`."""


def message_tree(
    conn: sqlite3.Connection, conv_id: int
) -> tuple[MessageTree[Message], dict[int, Message]]:
    """Every message of a conversation, every branch, and each one by its id."""
    # Positions grow with each message written: a parent always comes before its
    # children. A parent that is missing (it cannot be, short of editing the file
    # by hand) makes its children first messages rather than losing them.
    rows = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY position",
        (conv_id,),
    ).fetchall()
    by_id: dict[int, Message] = {}
    tree: MessageTree[Message] = MessageTree()
    for row in rows:
        message = message_from_row(row)
        parent_id = row[17]
        message.parent = None if parent_id is None else by_id.get(parent_id)
        by_id[row[0]] = message
        tree.add(message)
    attached: dict[int, list[Attachment]] = {}
    for message_id, name, text in conn.execute(
        "SELECT a.message_id, a.name, a.text FROM attachments a "
        "JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = ? "
        "ORDER BY a.message_id, a.position",
        (conv_id,),
    ):
        attached.setdefault(message_id, []).append(Attachment(name, text))
    for message_id, attachments in attached.items():
        if message_id in by_id:
            by_id[message_id].attachments = tuple(attachments)
    return tree, by_id


# Values read back. SQLite keeps whatever another program put in a column (a
# text where a time goes, Infinity, bytes where text goes): each value is
# read as kvchat wrote it, else as not there, so that a conversation edited or
# damaged by hand still lists, opens and exports (it was a traceback).


def stored_text(value: object) -> str:
    """Text as written; bytes (or a number) that another program put there, as
    text (shown, never run: the UI sanitizes every text it draws)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def stored_time(value: object) -> float:
    """A time (seconds since the epoch); 0 (1970) for one that is not a time."""
    return float(value) if is_time(value) else 0.0  # type: ignore[arg-type]


def _stored_count(value: object) -> int | None:
    return value if is_count(value) else None


def _stored_figure(value: object) -> float | None:
    return float(value) if is_figure(value) else None  # type: ignore[arg-type]


def _stats_from_row(values: Sequence[object]) -> ReplyStats | None:
    """A reply's stats (`STATS_COLUMNS`); none when the finish reason is not
    there (a message that is not a reply) or a figure is not what kvchat
    writes (the reply shows no figures, as one saved without them)."""
    (prompt, evaluated, generated, ttft_s, decode_tps, finish, seed, total_s) = values[:8]
    thinking_tokens, first_answer_s = values[8:10]
    counts = [_stored_count(value) for value in (prompt, evaluated, generated)]
    figures = [_stored_figure(value) for value in (ttft_s, decode_tps)]
    if finish not in FINISH_REASONS or None in counts or None in figures:
        return None
    prompt_tokens, prompt_evaluated, generated_tokens = cast(list[int], counts)
    ttft, rate = cast(list[float], figures)
    return ReplyStats(
        prompt_tokens=prompt_tokens,
        prompt_evaluated=prompt_evaluated,
        generated_tokens=generated_tokens,
        ttft_s=ttft,
        decode_tps=rate,
        finish_reason=cast(FinishReason, finish),
        seed=_stored_count(seed),
        total_s=_stored_figure(total_s) or 0.0,
        # NULL in rows saved before replies were split (schema 8).
        thinking_tokens=_stored_count(thinking_tokens) or 0,
        first_answer_s=_stored_figure(first_answer_s),
    )


def message_from_row(row: tuple[Any, ...]) -> Message:
    (id_, role, content, created, token_count) = row[:5]
    token_probs, writer_pid, interrupted, token_ids = row[13:17]
    thinking, tool_steps, thought_open = row[18], row[21], row[22]
    stats = _stats_from_row((*row[5:13], row[19], row[20]))
    return Message(
        # A role kvchat does not write is shown as the user's (never as the
        # system prompt or a reply, which the next turn would send as such).
        role=cast(Role, role if role in ROLES else "user"),
        content=stored_text(content),
        created=stored_time(created),
        token_count=_stored_count(token_count),
        stats=stats,
        id=id_,
        # Decoded only when the token view reads it: opening a long conversation
        # does not pay for every reply's probabilities.
        token_probs=StoredTokenChoices(token_probs) if isinstance(token_probs, bytes) else None,
        state=_reply_state(_stored_count(writer_pid), interrupted),
        token_ids=_token_ids_from_blob(token_ids) if isinstance(token_ids, bytes) else None,
        thinking=stored_text(thinking),
        thought_open=bool(thought_open),
        tool_steps=_tool_steps(tool_steps if isinstance(tool_steps, str) else None),
    )


def _tool_steps(text: str | None) -> tuple[ToolStep, ...]:
    """A reply's stored tool steps; none (the reply as its answer alone) for a
    damaged value, as for damaged token ids: the conversation still opens."""
    try:
        return steps_from_json(text)
    except ToolStepsError:
        return ()


def _reply_state(writer_pid: int | None, interrupted: int) -> ReplyState:
    if interrupted:
        return "interrupted"
    if writer_pid is None:
        return "complete"
    return "writing" if _is_running(writer_pid) else "interrupted"


def _is_running(pid: int) -> bool:
    """Whether the process that is writing a reply still runs: then the reply is
    being written now (another kvchat window), not cut off.

    A pid that another process took since reads as running: that reply is then
    shown as it is, unmarked, as before kvchat recorded writers.
    """
    if pid <= 0:
        return False
    if os.name == "nt":
        return True  # there os.kill would end the process instead of probing it
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, only whether the process exists
    except ProcessLookupError:
        return False
    except OSError:
        return True  # e.g. PermissionError: it runs, as another user
    return True


def stats_values(stats: ReplyStats | None) -> tuple[Any, ...]:
    """The values of `STATS_COLUMNS`."""
    if stats is None:
        return (None,) * len(STATS_COLUMNS)
    return (
        stats.prompt_tokens,
        stats.prompt_evaluated,
        stats.generated_tokens,
        stats.ttft_s,
        stats.decode_tps,
        stats.finish_reason,
        stats.seed,
        stats.total_s,
        stats.thinking_tokens,
        stats.first_answer_s,
    )


def token_probs_value(choices: Sequence[TokenChoice] | None) -> bytes | None:
    return None if choices is None else encode_token_probs(choices)


def token_ids_blob(token_ids: Sequence[int] | None) -> bytes | None:
    """Token ids as 32-bit little-endian integers: 4 bytes a token."""
    if token_ids is None:
        return None
    values = array("i", token_ids)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def _token_ids_from_blob(blob: bytes) -> list[int] | None:
    """`token_ids_blob` read back; None (as if not recorded) for a damaged value."""
    values = array("i")
    if values.itemsize != 4 or len(blob) % 4:
        return None
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def backend_value(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    return backend


def model_path_value(path: str) -> str:
    """The model's path as stored: for a model server, its URL made a path,
    never with a user name or password (databases before issue 27 held them)."""
    return split_credentials(path)[0]


def server_url_value(url: str) -> str:
    """The server URL as stored: never a user name, password or query, even if
    the caller's conversation holds one."""
    return public_url(url) if url else ""


def sampling_json(sampling: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(sampling or {}))


def sampling_from_json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
