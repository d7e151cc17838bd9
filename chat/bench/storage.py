"""Saved conversations: how long the database and the app take with many.

A long conversation is loaded from the database and shown in the chat screen
(docs/performance.md, "Targets": opening 2,000 messages < 1 s), found in far
up (Ctrl+F on a word of its first message, `FIND_UP` messages up) and
scrolled to its top a screenful at a time; and the first page
of a database with many conversations is listed, as the conversations screen
does."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from chat.bench.rows import Options, Row
from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.find_bar import FindBar

FIND_UP = 400
"""How far above the newest message the match is (issue 33: 8.8 s before the
view jumped to it)."""


def storage_rows(options: Options) -> list[Row]:
    messages, conversations = options.messages, options.conversations
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "bench.db")
        conv = Conversation(system_prompt="You are a helpful assistant.", title="long")
        conv.messages = [
            Message(
                "user" if i % 2 == 0 else "assistant",
                f"Message {i}: " + "words and more words " * 20,
            )
            for i in range(messages)
        ]
        conv_id = store.import_conversation(conv, {})
        started = time.perf_counter()
        loaded = store.get_conversation(conv_id)
        rows.append(
            Row(
                f"load {messages:,} messages from the database",
                (time.perf_counter() - started) * 1000,
                "ms",
                note=f"{len(loaded.messages):,} loaded",
            )
        )
        rows.append(open_in_app_row(loaded))
        rows.append(find_far_up_row(loaded.messages[: FIND_UP + 2]))
        rows += scroll_up_rows(loaded)
        for i in range(conversations - 1):
            small = Conversation(title=f"conversation {i}")
            small.messages = [Message("user", f"hello {i}"), Message("assistant", "hi")]
            store.import_conversation(small, {})
        started = time.perf_counter()
        listed = store.list_conversations(limit=200)
        elapsed_ms = (time.perf_counter() - started) * 1000
        rows.append(
            Row(
                f"list {conversations:,} conversations (first page)",
                elapsed_ms,
                "ms",
                "< 100 ms",
                elapsed_ms < 100,
                note=f"{len(listed)} shown",
            )
        )
        store.close()
    return rows


def open_in_app_row(conversation: Conversation) -> Row:
    """Time to show a stored conversation in the chat screen."""

    async def run() -> float:
        app = ChatApp(Launch(Settings(), None))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            started = time.perf_counter()
            await app.chat_screen.open_conversation(conversation)
            await pilot.pause()
            return time.perf_counter() - started

    elapsed = asyncio.run(run())
    return Row(
        f"open {len(conversation.messages):,}-message conversation in the app",
        elapsed,
        "s",
        "< 1 s",
        elapsed < 1.0,
    )


def find_far_up_row(messages: list[Message]) -> Row:
    """Ctrl+F on a word of the first message, `len(messages) - 2` messages up:
    from the query in the bar to the match in sight."""
    conversation = Conversation(system_prompt="You are a helpful assistant.", title="find")
    conversation.messages = list(messages)
    target = conversation.messages[0]
    query = " ".join(target.content.split(" ", 2)[:2])  # "Message 0:"

    async def run() -> float:
        async with _opened(conversation) as (screen, pilot, view):
            await screen.action_find()
            await pilot.pause()
            bar = screen.query_one(FindBar)
            started = time.perf_counter()
            bar.query_one("#find-input", Input).value = query
            while not _in_sight(view, target):
                await pilot.pause(0.005)
                if time.perf_counter() - started > 60:
                    raise TimeoutError("the match never came into sight")
            return time.perf_counter() - started

    elapsed = asyncio.run(run())
    return Row(
        f"find a match {len(messages) - 2:,} messages up (Ctrl+F)",
        elapsed,
        "s",
        "<= 0.5 s",
        elapsed <= 0.5,
        note="from the query typed to the match in sight",
    )


@asynccontextmanager
async def _opened(
    conversation: Conversation,
) -> AsyncIterator[tuple[ChatScreen, Pilot[Any], ConversationView]]:
    """The app running headless with `conversation` open in its chat screen."""
    app = ChatApp(Launch(Settings(), None))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.chat_screen
        await screen.open_conversation(conversation)
        await pilot.pause()
        yield screen, pilot, screen.query_one(ConversationView)


def _in_sight(view: ConversationView, message: Message) -> bool:
    for shown in view.message_views():
        if shown.message is message:
            top = shown.region.y
            return bool(shown.region.height) and view.region.y <= top < view.region.bottom
    return False


def scroll_up_rows(conversation: Conversation) -> list[Row]:
    """Page Up from the newest message to the top of the conversation, waiting
    for the app to settle after each: how long a Page Up takes to reach the
    screen (until the frame after it is drawn); the longest the app's event
    loop was held meanwhile (no frame drawn, no key read), by a task that
    wakes every 5 ms (often enough to see a stall, rarely enough to leave the
    steps as they were: Textual's test pilot waits for the process to be
    idle); and how long a page of older messages took to mount above, which
    the view does after the frame that shows the Page Up, keeping the place
    in every frame (chat/ui/widgets/conversation_view.py)."""

    async def run() -> tuple[float, float, float, int, int]:
        async with _opened(conversation) as (screen, pilot, view):
            held = 0.0
            stop = asyncio.Event()

            async def watch_the_loop() -> None:
                nonlocal held
                last = time.perf_counter()
                while not stop.is_set():
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    held = max(held, now - last - 0.005)
                    last = now

            watcher = asyncio.create_task(watch_the_loop())
            to_frame = to_page = 0.0
            steps = pages = 0
            step = {"from": 0.0, "started": 0.0, "drawn": 0.0}

            def frame_drawn(_: object) -> None:
                # Textual publishes this right after a frame is composed.
                if not step["drawn"] and view.scroll_y != step["from"]:
                    step["drawn"] = time.perf_counter()

            screen.screen_layout_refresh_signal.subscribe(view, frame_drawn)
            while view.earlier_count or view.scroll_y > 0:
                waiting = view.earlier_count
                step.update({"from": view.scroll_y, "started": time.perf_counter(), "drawn": 0.0})
                # The key, as the user presses it (the message box has focus
                # and passes Page Up to the conversation).
                pilot.app.post_message(events.Key("pageup", None))
                await pilot.pause()
                if step["drawn"]:
                    to_frame = max(to_frame, step["drawn"] - step["started"])
                if view.earlier_count != waiting:
                    pages += 1
                    to_page = max(to_page, time.perf_counter() - step["started"])
                steps += 1
                if steps > 10 * len(conversation.messages):
                    raise TimeoutError("the top was never reached")
            stop.set()
            await watcher
            return to_frame, held, to_page, steps, pages

    to_frame, held, to_page, steps, pages = asyncio.run(run())
    name = f"scroll to the top of a {len(conversation.messages):,}-message conversation"
    return [
        Row(
            f"{name}: Page Up to its frame, longest",
            to_frame * 1000,
            "ms",
            "< 100 ms",
            to_frame < 0.1,
            note=f"{steps:,} screenfuls up, {pages:,} pages of older messages mounted",
        ),
        Row(
            f"{name}: longest hold of the event loop (no frame, no key)",
            held * 1000,
            "ms",
            "< 100 ms",
            held < 0.1,
            note="a page mounts over several frames, each drawn with the place kept",
        ),
        Row(
            f"{name}: a page of older messages mounted, longest",
            to_page * 1000,
            "ms",
            note="after the Page Up's frame, while the user reads; with the pilot's wait for idle",
        ),
    ]
