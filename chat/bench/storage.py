"""Saved conversations: how long the database and the app take with many.

A long conversation is loaded from the database and shown in the chat screen
(docs/performance.md, "Targets": opening 2,000 messages < 1 s), and the first page of a database
with many conversations is listed, as the conversations screen does."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from chat.bench.rows import Options, Row
from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch


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
