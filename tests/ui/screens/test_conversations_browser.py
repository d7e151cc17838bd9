"""Conversations in the app: saved as they happen, browsed, reopened and
continued, exported; a database kvchat cannot use; a database another program
holds locked. Driven with Pilot on a scripted engine (the real model: at the end)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest
from textual.widgets import Button, DataTable, Input, Static

import chat.conversations.database_file as database_file
from chat import paths
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.models.files import ModelCandidate
from chat.settings.schema import ModelSettings, SamplingSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.conversations import ConversationsScreen, relative_time
from chat.ui.screens.dialogs import ConfirmScreen, RenameScreen, StorageProblemScreen
from chat.ui.widgets.conversation_view import ConversationView, EarlierMessages
from chat.ui.widgets.message_view import AssistantMessageView, MessageView, UserMessageView
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import (
    header_of,
    make_app,
    ready,
    rendered,
    reply_on_screen,
    run_command,
    send,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
STATS = ReplyStats(30, 12, 4, 0.05, 80.0, "done", seed=3, total_s=0.1)


def db() -> Path:
    return paths.database_file()


def saved(conv_id: int | None = None) -> Conversation:
    """What the database holds now, read by a second connection."""
    with Store(db()) as store:
        found = conv_id if conv_id is not None else store.latest_conversation_id()
        assert found is not None, "nothing saved"
        return store.get_conversation(found)


async def dialog(app: ChatApp, pilot, kind: type) -> None:  # type: ignore[no-untyped-def]
    """Wait until a dialog of this kind is on top with its buttons mounted."""
    await wait_for(lambda: isinstance(app.screen, kind) and bool(app.screen.query("Button")), pilot)
    await pilot.pause()


def notified(app: ChatApp, text: str) -> bool:
    return any(text in n.message for n in app.notices)


def saved_reply_now() -> str:
    """The newest reply as the database holds it this moment ("" before there is
    one): a read-only query cheap enough to poll while the app writes."""
    if not db().exists():
        return ""
    try:
        with sqlite3.connect(f"file:{db()}?mode=ro", uri=True) as conn:
            row = conn.execute(
                "SELECT content FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1"
            ).fetchone()
    except sqlite3.OperationalError:  # no tables yet
        return ""
    return row[0] if row else ""


def make_saved_conversation(
    turns: int = 2,
    *,
    system: str = "Talk like a pirate.",
    model_path: str = "/models/scripted.gguf",
) -> int:
    conv = Conversation(system_prompt=system, title="Pirate talk", model_path=model_path)
    conv.model_name = Path(model_path).stem
    for i in range(turns):
        conv.messages.append(Message("user", f"question {i}"))
        conv.messages.append(Message("assistant", f"**answer** {i}", stats=STATS))
    sampling = asdict(SamplingSettings(temperature=0.1, seed=99, max_tokens=200))
    with Store(db()) as store:
        return store.create_conversation(conv, sampling)


# --- saved as it happens -------------------------------------------------------------


async def test_user_message_is_saved_before_generation_and_reply_at_the_end() -> None:
    seen_in_db: list[list[str]] = []

    def check_database() -> None:
        """What the database held when the engine was called."""
        with sqlite3.connect(db()) as conn:
            rows = conn.execute("SELECT content FROM messages ORDER BY id").fetchall()
        seen_in_db.append([row[0] for row in rows])

    engine = ScriptedEngine(replies=[["Ahoy", " there"]], on_reply=check_database)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "Say hello\nplease")
        await turn_done(screen, pilot, 2)
    # The user's message (and the reply's empty row) were there before the first token.
    assert seen_in_db == [["Say hello\nplease", ""]]
    conv = saved()
    assert conv.title == "Say hello"
    assert (conv.model_path, conv.model_name) == ("/models/scripted.gguf", "scripted")
    assert conv.system_prompt == Settings().chat.system_prompt
    user, reply = conv.messages
    assert (user.role, user.content) == ("user", "Say hello\nplease")
    assert reply.content == "Ahoy there"
    assert reply.stats is not None and reply.stats.finish_reason == "done"
    assert reply.stats.generated_tokens == 2 and reply.stats.seed == 1234
    with Store(db()) as store:
        assert store.get_sampling(conv.id or 0) == asdict(SamplingSettings())


async def test_reply_is_saved_while_it_streams_and_stop_keeps_it() -> None:
    # 100 tokens a second for 50 seconds: still streaming whatever the machine's speed.
    engine = ScriptedEngine(replies=[[f"w{i} " for i in range(5000)]], delay=0.01)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "count")
        # Saved as it streams: a second reader sees the reply grow, a save at a time.
        await wait_for(lambda: len(saved_reply_now().split()) >= 20, pilot)
        assert screen.generating
        during = saved().messages[-1].content
        assert during.startswith("w0 w1 ") and len(during.split()) >= 20
        await pilot.press("escape")
        await wait_for(lambda: not screen.generating, pilot)
        shown = screen.conversation.messages[-1].content
    reply = saved().messages[-1]
    assert reply.content == shown and len(reply.content) > len(during)
    assert reply.stats is not None and reply.stats.finish_reason == "stopped"


async def test_quit_mid_reply_saves_the_reply_so_far() -> None:
    engine = ScriptedEngine(replies=[[f"w{i} " for i in range(5000)]], delay=0.01)
    app = make_app(engine)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await send(pilot, "go")
        await wait_for(lambda: "w0 w1" in reply_on_screen(app), pilot)
        shown = reply_on_screen(app).split()
        await pilot.press("ctrl+q")
    # Everything that was on screen when the user quit was saved.
    reply = saved().messages[-1]
    assert reply.content.split()[: len(shown)] == shown


async def test_regenerate_replaces_the_reply_and_keeps_the_old_one() -> None:
    engine = ScriptedEngine(replies=[["first"], ["second"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "question")
        await turn_done(screen, pilot, 2)
        await pilot.press("ctrl+r")
        await wait_for(lambda: len(engine.calls) == 2 and not screen.generating, pilot)
    conv = saved()
    assert [m.content for m in conv.messages] == ["question", "second"]
    assert [m.content for m in conv.tree.siblings(conv.messages[1])] == ["first", "second"]


async def test_a_message_that_does_not_fit_is_not_left_in_the_database() -> None:
    engine = ScriptedEngine(n_ctx=30)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        # Fits the meter's plan (no reply reserve counted) but not the engine's window.
        screen.settings.sampling.max_tokens = 1
        await send(pilot, "word " * 24)
        await wait_for(lambda: notified(app, "window holds"), pilot)
        await wait_for(lambda: not screen.generating, pilot)
    with Store(db()) as store:
        assert store.list_conversations() == []


async def test_a_locked_database_gives_a_notice_and_the_chat_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(database_file, "BUSY_TIMEOUT_S", 0.2)
    engine = ScriptedEngine(replies=[["one"], ["two"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        other = sqlite3.connect(db(), isolation_level=None)  # another program, mid-write
        other.execute("BEGIN IMMEDIATE")
        try:
            await send(pilot, "first")
            await turn_done(screen, pilot, 2)
        finally:
            other.execute("COMMIT")
            other.close()
        assert notified(app, "locked")
        assert app.is_running
        await send(pilot, "second")
        await turn_done(screen, pilot, 4)
    # Everything missed while locked was written, in order, with the next message.
    assert [m.content for m in saved().messages] == ["first", "one", "second", "two"]


def test_kill_9_mid_reply_loses_at_most_the_last_second(tmp_path: Path) -> None:
    """A real process: the app, headless, streaming a reply; then SIGKILL."""
    side = tmp_path / "streamed.jsonl"
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.ui.app.kill_driver", str(side)],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def streamed() -> list[tuple[float, str]]:
        """What the driver has streamed so far, [time, text] a piece (whole lines only)."""
        if not side.exists():
            return []
        return [tuple(json.loads(line)) for line in side.read_text().split("\n")[:-1]]

    def streaming_for(seconds: float) -> bool:
        assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
        so_far = streamed()
        return bool(so_far) and so_far[-1][0] - so_far[0][0] >= seconds

    try:
        # Kill it mid-reply, once it has streamed (and so saved, every half
        # second) for two seconds.
        poll_until(lambda: streaming_for(2.0) and saved_reply_now(), 30)
    finally:
        killed_at = time.time()
        process.kill()
        process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL

    with sqlite3.connect(db()) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    user, reply = saved().messages
    assert (user.role, user.content) == ("user", "Count slowly")
    pieces = streamed()
    everything = "".join(text for _, text in pieces)
    by_a_second_ago = "".join(text for at, text in pieces if at <= killed_at - 1.0)
    assert len(by_a_second_ago.split()) > 20  # it streamed for over a second
    assert everything.startswith(reply.content)  # only streamed text was saved
    assert reply.content.startswith(by_a_second_ago)
    lost = len(everything.split()) - len(reply.content.split())
    print(f"\nkill -9: {len(everything.split())} tokens streamed, {lost} not saved (100 tokens/s)")


def poll_until(condition: Callable[[], object], timeout: float) -> None:
    """Wait for `condition()` outside the app (another process's files), checking
    twenty times a second; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)  # a poll, not a pause: the condition is checked again


# --- reopening -----------------------------------------------------------------------


async def browse(app: ChatApp, pilot) -> ConversationsScreen:  # type: ignore[no-untyped-def]
    """The app ready with its database, then Ctrl+O: the list."""
    await ready(app, pilot)
    await wait_for(lambda: app.store is not None, pilot)
    await pilot.press("ctrl+o")
    await wait_for(lambda: isinstance(app.screen, ConversationsScreen), pilot)
    assert isinstance(app.screen, ConversationsScreen)
    return app.screen


async def open_from_list(app: ChatApp, pilot, row: int = 0) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("ctrl+o")
    await wait_for(lambda: isinstance(app.screen, ConversationsScreen), pilot)
    table = app.screen.query_one(DataTable)
    await wait_for(lambda: table.row_count > row, pilot)
    table.move_cursor(row=row)
    await pilot.press("enter")
    await wait_for(lambda: isinstance(app.screen, ChatScreen), pilot)
    await pilot.pause()


async def test_reopen_restores_everything_and_continues() -> None:
    conv_id = make_saved_conversation(turns=2)
    engine = ScriptedEngine(replies=[["Arr", "!"]])
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await ready(app, pilot)
        await open_from_list(app, pilot)
        assert screen.conversation.id == conv_id
        views = app.query(MessageView)
        assert [v.message.role for v in views] == ["system", *["user", "assistant"] * 2]
        assert isinstance(views[1], UserMessageView)
        reply_view = app.query(AssistantMessageView).last()
        assert "answer 1" in rendered(reply_view.body)  # Markdown, rendered
        await wait_for(lambda: "80.0 tok/s" in header_of(reply_view), pilot)
        # This conversation's settings, not the defaults; the defaults are unchanged.
        assert screen.settings.sampling.temperature == 0.1
        assert screen.settings.sampling.seed == 99
        assert app.settings.sampling.temperature == SamplingSettings().temperature
        meter = app.query_one("#meter", Static)
        assert meter.state is not None and meter.state.history > 0  # type: ignore[attr-defined]

        await send(pilot, "and now?")
        await turn_done(screen, pilot, 6)
        sent, sampling = engine.calls[-1]
        assert sent[0] == {"role": "system", "content": "Talk like a pirate."}
        assert [m["content"] for m in sent[1:]] == [
            "question 0",
            "**answer** 0",
            "question 1",
            "**answer** 1",
            "and now?",
        ]
        assert sampling.temperature == 0.1 and sampling.seed == 99

        # A new conversation starts from the defaults again.
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert screen.settings.sampling.temperature == SamplingSettings().temperature
    conv = saved(conv_id)
    assert [m.content for m in conv.messages][-2:] == ["and now?", "Arr!"]
    with Store(db()) as store:
        assert store.get_sampling(conv_id)["temperature"] == 0.1


async def test_resume_at_start_and_model_mismatch_offers_a_switch(tmp_path: Path) -> None:
    other_model = tmp_path / "other.gguf"
    other_model.write_bytes(b"GGUF" + bytes(20))  # a header, no model
    conv_id = make_saved_conversation(model_path=str(other_model))
    first, second = ScriptedEngine(), ScriptedEngine(replies=[["switched"]])
    loaded: list[Path] = []
    closed: list[ScriptedEngine] = []
    first.close = lambda: closed.append(first)  # type: ignore[method-assign]

    def factory(path: Path, settings: ModelSettings) -> ScriptedEngine:
        loaded.append(path)
        return first if len(loaded) == 1 else second

    app = ChatApp(
        Launch(
            Settings(), ModelCandidate(Path("/models/scripted.gguf"), 1, "test"), resume=conv_id
        ),
        engine_factory=factory,
    )
    async with app.run_test(size=(100, 40)) as pilot:
        await dialog(app, pilot, ConfirmScreen)
        text = str(app.screen.query_one(".dialog-text", Static).render())
        assert "other" in text and str(other_model) in text and "scripted" in text
        await pilot.click("#yes")
        await wait_for(lambda: app.models.engine is second, pilot)
        assert loaded == [Path("/models/scripted.gguf"), other_model]
        assert closed == [first]
        assert app.chat_screen.conversation.id == conv_id


def screenful_above(view: ConversationView) -> bool:
    """Older messages are mounted as long as less than a screenful is above what
    the user sees: true once they stop (or none are left)."""
    return view.scroll_y >= view.size.height or view.earlier_count == 0


async def test_opening_2000_messages_mounts_a_few_and_older_ones_load_on_scroll() -> None:
    conv_id = make_saved_conversation(turns=1000)
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        view = app.query_one(ConversationView)
        await screen.open_conversation(conv_id)
        await wait_for(lambda: bool(app.query(MessageView)), pilot)
        last = app.query(MessageView).last()
        await wait_for(
            lambda: (
                last.message.content == "**answer** 999"
                and view.scroll_y == view.max_scroll_y
                and last.region.bottom > 0
            ),
            pilot,
        )
        # Only a few screenfuls are mounted: enough to scroll up a screen at once.
        await wait_for(lambda: screenful_above(view), pilot)
        mounted = len(app.query(MessageView))
        assert mounted < 100
        left = view.earlier_count
        assert left == 2000 - mounted + 1  # + the system prompt
        assert f"{left:,} earlier messages" in str(app.query_one(EarlierMessages).render())
        # Scrolling to the top mounts older messages, keeping the view in place.
        top_view = app.query(MessageView)[1]
        view.scroll_home(animate=False)
        await wait_for(lambda: view.earlier_count < left, pilot)
        await wait_for(lambda: view.scroll_y > 0 and screenful_above(view), pilot)
        assert top_view.region.y >= view.region.y  # what was at the top is still in sight
        # The conversation continues with the whole history.
        await send(pilot, "more")
        await turn_done(screen, pilot, 2002)


# --- the conversations screen ----------------------------------------------------------


def test_relative_time() -> None:
    now = 1_000_000.0
    assert relative_time(now - 5, now) == "just now"
    assert relative_time(now - 180, now) == "3 min ago"
    assert relative_time(now - 3 * 3600, now) == "3 h ago"
    assert relative_time(now - 86400 * 1.5, now) == "yesterday"
    assert relative_time(now - 86400 * 4, now) == "4 days ago"
    assert relative_time(now - 86400 * 30, now)[:2] in ("19", "20")  # a date


def make_list() -> dict[str, int]:
    with Store(db()) as store:
        ids = {
            "bread": store.create_conversation(
                Conversation(
                    title="Baking",
                    model_name="demo",
                    messages=[Message("user", "sourdough starter?"), Message("assistant", "Yes")],
                )
            ),
            "rust": store.create_conversation(Conversation(title="Rust lifetimes")),
            "tea": store.create_conversation(Conversation(title="Green tea")),
        }
    return ids


async def test_conversations_screen_filter_rename_delete_open() -> None:
    ids = make_list()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await pilot.press("ctrl+o")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen), pilot)
        browser = app.screen
        assert isinstance(browser, ConversationsScreen)
        table = browser.query_one(DataTable)
        assert table.row_count == 3
        first_row = [str(cell) for cell in table.get_row_at(0)]
        assert first_row[0] == "Green tea"  # newest first
        assert first_row[3] == "just now"
        bread_row = [str(cell) for cell in table.get_row(str(ids["bread"]))]
        assert bread_row[1:3] == ["demo", "2"]

        # Typing filters by title and by message text.
        await pilot.press("slash", *"sourdough")
        assert browser.query_one(Input).value == "sourdough"
        await wait_for(lambda: table.row_count == 1, pilot)
        assert browser.highlighted() is not None
        assert browser.highlighted().id == ids["bread"]  # type: ignore[union-attr]
        await pilot.press(*"x")
        await wait_for(lambda: table.row_count == 0, pilot)
        assert "No conversations match" in str(
            browser.query_one("#conversations-count", Static).render()
        )
        browser.query_one(Input).value = ""
        await wait_for(lambda: table.row_count == 3, pilot)

        # Rename the highlighted one.
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("r")
        await wait_for(lambda: isinstance(app.screen, RenameScreen), pilot)
        app.screen.query_one(Input).value = "Oolong, actually"
        await pilot.press("enter")
        await wait_for(lambda: app.screen is browser, pilot)
        assert str(table.get_row_at(0)[0]) == "Oolong, actually"
        assert saved(ids["tea"]).title == "Oolong, actually"

        # Delete asks first; Enter alone cancels.
        await pilot.press("d")
        await dialog(app, pilot, ConfirmScreen)
        assert "cannot be undone" in str(app.screen.query_one(".dialog-text", Static).render())
        await pilot.press("enter")
        await wait_for(lambda: app.screen is browser, pilot)
        assert table.row_count == 3
        await pilot.press("delete")
        await dialog(app, pilot, ConfirmScreen)
        await pilot.click("#yes")
        await wait_for(lambda: table.row_count == 2, pilot)
        with Store(db()) as store:
            assert ids["tea"] not in [c.id for c in store.list_conversations()]

        # Enter opens; Escape closes without opening.
        await pilot.press("escape")
        await wait_for(lambda: app.screen is screen, pilot)
        assert screen.conversation.id is None
        await pilot.press("ctrl+o")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen), pilot)
        app.screen.query_one(DataTable).move_cursor(row=1)
        await pilot.press("enter")
        await wait_for(lambda: screen.conversation.id == ids["bread"], pilot)
        assert [m.content for m in screen.conversation.messages] == ["sourdough starter?", "Yes"]


async def test_deleting_the_open_conversation_starts_a_new_one() -> None:
    ids = make_list()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await screen.open_conversation(ids["bread"])
        await pilot.press("ctrl+o")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen), pilot)
        table = app.screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(str(ids["bread"])))
        assert str(table.get_row(str(ids["bread"]))[0]).startswith("● ")  # the open one
        await pilot.press("d")
        await dialog(app, pilot, ConfirmScreen)
        assert "open now" in str(app.screen.query_one(".dialog-text", Static).render())
        await pilot.click("#yes")
        await wait_for(lambda: table.row_count == 2, pilot)
        await pilot.press("escape")
        await wait_for(lambda: screen.conversation.id is None, pilot)
        assert screen.conversation.messages == []
        assert [v.message.role for v in app.query(MessageView)] == ["system"]


async def test_ten_thousand_conversations_list_a_page_at_a_time() -> None:
    now = time.time()
    with Store(db()) as store, sqlite3.connect(db()) as conn:
        conn.executemany(
            "INSERT INTO conversations (title, created, updated, model_name) VALUES (?, ?, ?, ?)",
            [(f"chat {i}", now - i, now - i, "demo") for i in range(10_000)],
        )
        conn.commit()
        assert store.count_conversations() == 10_000
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 30)) as pilot:
        table = (await browse(app, pilot)).query_one(DataTable)
        await wait_for(lambda: table.row_count > 0, pilot)
        await pilot.pause()
        assert table.row_count == ConversationsScreen.PAGE
        count = str(app.screen.query_one("#conversations-count", Static).render())
        assert "showing 200 of 10,000" in count
        assert str(table.get_row_at(0)[0]) == "chat 0"
        await pilot.press("end")  # the cursor nears the end: the next page loads
        await wait_for(lambda: table.row_count == 2 * ConversationsScreen.PAGE, pilot)
        assert str(table.get_row_at(399)[0]) == "chat 399"


async def test_command_palette_opens_the_conversation_list() -> None:
    make_list()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await run_command(pilot, "saved conv", "Open saved conversation")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen), pilot)
        table = app.screen.query_one(DataTable)
        await wait_for(lambda: table.row_count == 3, pilot)
        titles = [str(table.get_row_at(row)[0]) for row in range(3)]
        assert titles == ["Green tea", "Rust lifetimes", "Baking"]


# --- a database kvchat cannot use ------------------------------------------------------


def corrupt_database() -> bytes:
    path = db()
    path.parent.mkdir(parents=True, exist_ok=True)
    content = b"this is not a database, but it is someone's file\n" * 50
    path.write_bytes(content)
    return content


async def test_corrupt_database_is_left_alone_unless_the_user_agrees() -> None:
    content = corrupt_database()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await dialog(app, pilot, StorageProblemScreen)
        text = str(app.screen.query_one("#problem", Static).render())
        assert str(db()) in text and "not a SQLite database" in text
        await pilot.click("#continue")
        screen = await ready(app, pilot)
        status = app.query_one(StatusBar).full_text()
        assert "not saving" in status and str(db()) in status
        await send(pilot, "hello")
        await turn_done(screen, pilot, 2)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        assert notified(app, "not available")
    assert db().read_bytes() == content
    assert sorted(p.name for p in db().parent.iterdir()) == [db().name]


async def test_corrupt_database_moved_aside_with_consent() -> None:
    content = corrupt_database()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await dialog(app, pilot, StorageProblemScreen)
        await pilot.click("#move")
        screen = await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        assert notified(app, ".corrupt-")
        assert "not saving" not in app.query_one(StatusBar).full_text()
        await send(pilot, "hello")
        await turn_done(screen, pilot, 2)
    kept = [p for p in db().parent.iterdir() if ".corrupt-" in p.name]
    assert len(kept) == 1 and kept[0].read_bytes() == content
    assert [m.content for m in saved().messages] == ["hello", "Hello there!"]


def newer_kvchat_database() -> bytes:
    """The database file as a newer kvchat left it (a schema version this one
    does not know); returns its bytes."""
    db().parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db()) as conn:
        conn.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY)")
        conn.execute("PRAGMA user_version = 99")
    return db().read_bytes()


async def test_newer_schema_is_explained_and_can_be_kept() -> None:
    before = newer_kvchat_database()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await dialog(app, pilot, StorageProblemScreen)
        assert "newer version" in str(app.screen.query_one("#problem", Static).render())
        await pilot.press("escape")  # = continue without saving
        await ready(app, pilot)
        assert "not saving" in app.query_one(StatusBar).full_text()
    assert db().read_bytes() == before


async def test_a_newer_kvchat_s_database_is_never_offered_to_move_aside() -> None:
    before = newer_kvchat_database()
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await dialog(app, pilot, StorageProblemScreen)
        problem = str(app.screen.query_one("#problem", Static).render())
        assert "was written by a newer version of kvchat" in problem
        assert "kvchat has not changed it" in problem
        assert not app.screen.query("#move")
        buttons = [str(b.label) for b in app.screen.query(Button)]
        assert buttons == ["Continue without saving", "Quit"]
        await pilot.click("#continue")
        screen = await ready(app, pilot)
        await send(pilot, "hello")
        await turn_done(screen, pilot, 2)
    assert db().read_bytes() == before
    assert sorted(p.name for p in db().parent.iterdir()) == [db().name]


# --- export ----------------------------------------------------------------------------


async def test_ctrl_e_exports_from_the_prompt_box_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    app = make_app(ScriptedEngine(replies=[["**Bold** reply"]]))
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await pilot.press("ctrl+e")
        assert notified(app, "nothing to export")
        await send(pilot, "Export me")
        await turn_done(screen, pilot, 2)
        await pilot.press(*"draft")  # the prompt box has the focus
        await pilot.press("ctrl+e")
        await pilot.pause()
        first = out / f"export-me-{screen.conversation.id}.md"
        assert first.is_file()
        assert notified(app, str(first))
        text = first.read_text()
        assert "# Export me" in text and "## User" in text and "**Bold** reply" in text
        first.write_text("my notes")
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert first.read_text() == "my notes"
        assert (out / f"export-me-{screen.conversation.id}-2.md").is_file()
        assert screen.query_one("#prompt").text == "draft"  # type: ignore[attr-defined]


# --- the real model ---------------------------------------------------------------------


@pytest.mark.model
async def test_real_model_reply_saved_then_reopened_and_continued(demo_model: Path) -> None:
    candidate = ModelCandidate(demo_model, demo_model.stat().st_size, "demo")
    settings = Settings()
    settings.sampling.temperature = 0
    settings.sampling.max_tokens = 40
    app = ChatApp(Launch(settings, candidate))
    async with app.run_test() as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=120)
        await send(pilot, "Name one colour.")
        await turn_done(screen, pilot, 2, timeout=120)
        conv_id = screen.conversation.id
        first_reply = screen.conversation.messages[-1]
        await pilot.press("ctrl+q")
    conv = saved(conv_id)
    assert conv.model_path == str(demo_model)
    reply = conv.messages[-1]
    assert reply.content == first_reply.content and reply.content.strip()
    assert reply.stats is not None and reply.stats.generated_tokens > 0
    assert reply.stats.prompt_tokens > 0 and reply.stats.decode_tps > 0

    app = ChatApp(Launch(Settings(), candidate, resume=conv_id))
    async with app.run_test() as pilot:
        screen = app.chat_screen
        await wait_for(
            lambda: screen.engine is not None and screen.conversation.id == conv_id,
            pilot,
            timeout=120,
        )
        assert screen.settings.sampling.temperature == 0
        assert not isinstance(app.screen, ConfirmScreen)  # same model: nothing to offer
        await send(pilot, "Name another one.")
        await turn_done(screen, pilot, 4, timeout=120)
        stats = screen.conversation.messages[-1].stats
        assert stats is not None and stats.prompt_tokens > reply.stats.prompt_tokens
        await pilot.press("ctrl+q")
    assert [m.role for m in saved(conv_id).messages] == ["user", "assistant"] * 2


async def test_every_column_stays_in_sight_however_narrow_the_terminal() -> None:
    # At 110 columns a 62-character title and a long model name pushed "Last
    # activity" off the right edge (the list scrolls only vertically).
    with Store(db()) as store:
        ids = [
            store.create_conversation(
                Conversation(
                    title=f"Conversation {number}: " + "a title as long as a first message " * 2,
                    model_name="Qwen2.5-Coder-14B-Instruct-abliterated-Q4_K_M",
                )
            )
            for number in range(3)
        ]
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(110, 34)) as pilot:
        browser = await browse(app, pilot)
        table = browser.query_one(DataTable)
        await wait_for(lambda: table.row_count == 3, pilot)
        await pilot.press("down")
        assert browser.highlighted().id == ids[1]  # type: ignore[union-attr]
        for width in (110, 60, 200):
            await pilot.resize_terminal(width, 34)
            await pilot.pause()
            assert table.max_scroll_x == 0, width  # nothing off the edge
            assert table.virtual_size.width <= table.scrollable_content_region.width
            assert browser.highlighted().id == ids[1]  # type: ignore[union-attr]
        # Wide enough: nothing is cut short any more.
        assert all(column.auto_width for column in table.columns.values())
