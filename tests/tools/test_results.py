"""A tool result as text for the model, cut to the limit at a character boundary."""

from __future__ import annotations

import mcp_types

from chat.tools.results import cut_text, result_text


def test_text_blocks_are_joined() -> None:
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="one"), mcp_types.TextContent(text="two")]
    )
    assert result_text(result).text == "one\ntwo"


def test_what_is_not_text_is_named() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.ImageContent(data="AAAA", mime_type="image/png"),
            mcp_types.ResourceLink(uri="file:///x", name="x"),
        ],
        is_error=True,
    )
    shown = result_text(result)
    assert shown.is_error
    assert shown.text == (
        "[image: image/png, 3 bytes, not shown to the model]\n[link to the resource file:///x]"
    )


def test_structured_content_without_blocks() -> None:
    result = mcp_types.CallToolResult(content=[], structured_content={"a": 1})
    assert result_text(result).text == '{\n  "a": 1\n}'


def test_a_cut_never_splits_a_character() -> None:
    cut = cut_text("é" * 10, 5)  # two bytes each: the third would be split
    assert cut.cut and cut.size == 20
    assert cut.text.startswith("éé\n[kvchat cut this result: it was 20 bytes;")


def test_within_the_limit_nothing_changes() -> None:
    kept = cut_text("abc", 3)
    assert kept.text == "abc" and not kept.cut and kept.size == 3
