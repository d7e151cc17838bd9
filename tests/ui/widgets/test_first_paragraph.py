"""A reply that starts to stream is mounted with its first paragraph, empty,
and the paragraph's reserve: the first words go into it with no mount and
no layout of their own. Whatever the answer begins with, and whatever
becomes of the reply (it thinks first, it is stopped before a word), it
ends as the reply shown whole."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.screen import Screen

from chat.conversations.conversation import Message
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.reply_markdown import STREAM_RESERVE_LINES, ReplyMarkdown
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send
from tests.ui.widgets.test_streamed_blocks import blocks, drawn_rows, token_pieces


def paragraph_class() -> type:
    return ReplyMarkdown.BLOCKS["paragraph_open"]


class Host(App[None]):
    """One reply's view, streaming from its mount as the conversation mounts it."""

    def compose(self) -> ComposeResult:
        view = AssistantMessageView(Message("assistant", ""))
        view.start_stream()
        yield view


def count_layouts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each full layout of a screen, appended as it happens."""
    layouts: list[int] = []
    refresh_layout = Screen._refresh_layout

    def counting(self: Screen[object], size: object = None, scroll: bool = False) -> None:
        if not (scroll and not self._layout_widgets):
            layouts.append(1)
        refresh_layout(self, size, scroll)  # type: ignore[arg-type]

    monkeypatch.setattr(Screen, "_refresh_layout", counting)
    return layouts


async def streamed(pilot: Any, view: AssistantMessageView, text: str, reply: str) -> None:
    """`text` streamed into `view` a piece at a time; the reply, `reply`, ended."""
    for piece in token_pieces(text):
        await view.append(piece)
        await pilot.pause()
    await view.finish(reply, None)
    await pilot.pause()


async def drawn_as_whole(pilot: Any, view: AssistantMessageView) -> AssistantMessageView:
    """Asserts that `view` draws its reply as a view of the whole reply does
    (mounted below it, which is returned): the same blocks, size and rows."""
    whole = AssistantMessageView(Message("assistant", view.message.content))
    await pilot.app.mount(whole)
    await pilot.pause()
    assert blocks(view) == blocks(whole)
    assert view.body.size == whole.body.size
    assert drawn_rows(view.body) == drawn_rows(whole.body)
    return whole


async def test_the_first_words_go_into_the_paragraph_mounted_with_the_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Host().run_test(size=(80, 20)) as pilot:
        await pilot.pause()
        view = pilot.app.query_one(AssistantMessageView)
        (first,) = view.body.children
        assert isinstance(first, paragraph_class())
        assert first.size.height == 1 + STREAM_RESERVE_LINES  # its reserve, laid out
        layouts = count_layouts(monkeypatch)
        await view.append("The keeper logged the tide")
        await pilot.pause()
        await view.append(" and the wind.")
        await pilot.pause()
        assert list(view.body.children) == [first]
        assert first._content.plain == "The keeper logged the tide and the wind."
        assert layouts == []  # the words filled lines already laid out


@pytest.mark.parametrize(
    "reply",
    [
        "Plain words, then\n\na second paragraph.",
        "# A heading first\n\nthen words.",
        "```python\nprint('code first')\n```\n\nThen words.",
        "- a list first\n- and more\n\nThen words.",
        "\n\n  Blank lines before the words.",
    ],
)
async def test_a_reply_that_begins_with_any_block_ends_as_shown_whole(reply: str) -> None:
    async with Host().run_test(size=(80, 40)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        await streamed(pilot, view, reply, reply)
        await drawn_as_whole(pilot, view)


async def test_a_reply_stopped_before_its_first_word_leaves_no_empty_paragraph() -> None:
    async with Host().run_test(size=(80, 20)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        await view.finish("", None)
        await pilot.pause()
        assert list(view.body.children) == []
        assert view.body.size.height == 0


async def test_a_reply_that_thinks_first_keeps_no_reserve_under_its_thinking() -> None:
    async with Host().run_test(size=(80, 20)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        await view.append("", "The user asks about the tide.", 7)
        await pilot.pause()
        assert list(view.body.children) == []
        assert view.body.size.height == 0
        await view.append("High tide at noon.")
        await pilot.pause()
        (paragraph,) = view.body.children
        assert paragraph._content.plain == "High tide at noon."


async def test_a_reply_that_calls_a_tool_first_keeps_no_reserve_under_the_call() -> None:
    async with Host().run_test(size=(80, 20)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        await view.tool_steps()
        await pilot.pause()
        assert list(view.body.children) == []
        assert view.body.size.height == 0


async def test_in_the_app_the_reply_view_comes_with_its_first_paragraph() -> None:
    """The conversation mounts a reply's view streaming: while the prompt is
    read, the answer's first paragraph is there, and the words go into it."""
    engine = ScriptedEngine(
        replies=[["The ", "keeper ", "logged ", "the ", "tide."]],
        prompt_batches=4,
        prompt_hold_after=2,
    )
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await send(pilot, "What did the keeper log?")
        await wait_for(engine.holding.is_set, pilot)
        view = app.query(AssistantMessageView).last()
        await wait_for(lambda: len(view.body.children) == 1, pilot)
        first = view.body.children[0]
        assert isinstance(first, paragraph_class())
        engine.release.set()
        await wait_for(lambda: not view.streaming, pilot)
        assert list(view.body.children) == [first]
        assert first._content.plain == "The keeper logged the tide."


async def test_a_replys_start_lays_out_neither_a_hidden_switch_nor_its_first_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each layout arranges the whole screen again: at a reply's start, a
    branch switch no one sees (one alternative) set its text and asked for
    one, and the first words mounted a paragraph and asked for another."""
    asked: list[tuple[bool, set[str]]] = []  # each full layout: words shown yet, who asked
    refresh_layout = Screen._refresh_layout

    def counting(self: Screen[object], size: object = None, scroll: bool = False) -> None:
        if not (scroll and not self._layout_widgets):
            views = self.query(AssistantMessageView)
            words = bool(views) and views.last().streaming and bool(views.last().body.source)
            groups = self._layout_widgets.values()
            askers = {type(widget).__name__ for group in groups for widget in group}
            asked.append((words, askers))
        refresh_layout(self, size, scroll)  # type: ignore[arg-type]

    monkeypatch.setattr(Screen, "_refresh_layout", counting)
    words = ["The ", "keeper ", "logged ", "the ", "tide."]
    engine = ScriptedEngine(replies=[words, words], delay=0.03)
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        for question in ("What did the keeper log?", "And then?"):
            await send(pilot, question)
            view = app.query(AssistantMessageView).last()
            await wait_for(lambda: not view.streaming, pilot)  # noqa: B023
    assert asked
    assert not any("BranchSwitch" in askers for _, askers in asked), asked
    assert not any(words for words, _ in asked), asked


@pytest.mark.parametrize(
    "more",
    [
        " goes on.\n\nA third paragraph.",
        " goes on.\n\n- then a list\n- of two",
        "\n\n## A heading\n\nand words.",
    ],
)
async def test_a_continued_reply_drawn_by_one_paragraph_ends_as_shown_whole(more: str) -> None:
    """A reply stopped with two paragraphs drawn by one widget
    (`Paragraph.take_in`), then continued (Ctrl+L): whatever comes next, it
    ends as the reply shown whole."""
    first = "The keeper logged the tide.\n\nThen the wind"
    async with Host().run_test(size=(80, 40)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        await streamed(pilot, view, first, first)
        assert len(view.body.children) == 1  # both paragraphs, one widget
        view.start_stream()
        await streamed(pilot, view, more, first + more)
        await drawn_as_whole(pilot, view)


async def test_a_streamed_reply_drawn_from_its_kept_rows_rewraps_when_the_width_changes() -> None:
    """At its end the paragraph that streamed is drawn from the rows it
    kept; at another width it wraps again, as the reply shown whole does."""
    reply = "The keeper logged the tide and the wind. " * 5 + "\n\nThen he slept. " * 3
    async with Host().run_test(size=(80, 40)) as pilot:
        view = pilot.app.query_one(AssistantMessageView)
        await pilot.pause()
        await streamed(pilot, view, reply, reply)
        whole = await drawn_as_whole(pilot, view)
        for width in (53, 80):
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            assert view.body.size == whole.body.size
            assert drawn_rows(view.body) == drawn_rows(whole.body)
