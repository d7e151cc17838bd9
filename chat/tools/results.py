"""A tool's result as the text the model will read, cut to a size limit.

MCP results are a list of content blocks. Text is kept as it is (the text of
an embedded text resource too); what is not text (an image, audio, a binary
resource, a link) becomes a one-line placeholder saying what it was, since a
local model reads text. Structured content is used only when there is no
content block, as the JSON it is.

The result is cut to a byte limit here, before anything else sees it, with a
note that says so: the tool loop's own token limit (a later setting) and the
window must never meet 10 MB of text. The text stays untrusted: whatever
draws it sanitizes it (chat.sanitize).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chat.safe_files import human_limit
from chat.sanitize import sanitize_line

RESULT_LIMIT = 256 * 1024
"""Bytes of a result kept by default; more than any local window holds."""


@dataclass(frozen=True)
class ToolResult:
    """What one call gave back."""

    text: str
    """As the server sent it (cut, then the note), for the model."""
    is_error: bool = False
    """The tool itself reported a failure (the model should see it too)."""
    size: int = 0
    """Bytes of the whole text before any cut."""
    cut: bool = False


def result_text(result: Any, limit: int = RESULT_LIMIT) -> ToolResult:
    """`result` (the SDK's `CallToolResult`) as a ToolResult of at most
    `limit` bytes of the server's text, plus the note when it is cut."""
    parts = [_block_text(block) for block in getattr(result, "content", None) or ()]
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(_json(structured))
    text = "\n".join(parts)
    return cut_text(text, limit, is_error=bool(getattr(result, "is_error", False)))


def cut_text(text: str, limit: int, *, is_error: bool = False) -> ToolResult:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return ToolResult(text, is_error, len(data))
    # Cut at a character boundary: a UTF-8 sequence is never split.
    kept = data[:limit].decode("utf-8", "ignore")
    note = (
        f"\n[kvchat cut this result: it was {len(data):,} bytes; "
        f"the first {human_limit(limit)} are above]"
    )
    return ToolResult(kept + note, is_error, len(data), cut=True)


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(getattr(block, "data", "") or "") * 3 // 4  # base64
        mime = sanitize_line(str(getattr(block, "mime_type", "") or "unknown type"))
        return f"[{kind}: {mime}, {size:,} bytes, not shown to the model]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return text
        uri = sanitize_line(str(getattr(resource, "uri", "")))
        return f"[binary resource {uri}, not shown to the model]"
    if kind == "resource_link":
        uri = sanitize_line(str(getattr(block, "uri", "")))
        return f"[link to the resource {uri}]"
    return f"[content of the kind {sanitize_line(str(kind))!r}, not shown to the model]"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=2)
    except (TypeError, ValueError, RecursionError):
        return "[structured content that is not JSON]"
