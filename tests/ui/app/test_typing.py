"""Typing stays responsive whatever arrives: a paste that comes as keystrokes,
a huge draft, a huge conversation being counted (issue 15, point 3).

The keystroke floods go through a pseudo-terminal to the app run as `chat`
runs it (tests/ui/app/typing_driver.py), so that the terminal driver's parsing is
part of what is tested; the rest uses Pilot."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from chat.conversations.conversation import Conversation, Message
from chat.models.files import ModelCandidate
from chat.session.context_window import ContextBudget
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.meter_planner import COUNT_IN_THREAD_ABOVE, DRAFT_SAYS_COUNTING_ABOVE
from chat.ui.screens.chat import ChatScreen
from chat.ui.terminal_input import TypedText
from chat.ui.widgets.context_meter import ContextMeter, MeterState
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.ui.app.quit_driver import CTRL_Q, MODEL_READY, Terminal
from tests.ui.app.typing_driver import SlowTokenizer, Typed, big_conversation, start_typing_driver
from tests.ui.conftest import make_app, ready

END = "END-OF-FLOOD"


@pytest.fixture
def typing_app(tmp_path: Path) -> Iterator[Typed]:
    """The app with a scripted model in a pseudo-terminal, the model ready."""
    typed = start_typing_driver(tmp_path)
    try:
        assert typed.terminal.wait_for(MODEL_READY), typed.terminal.output[-2000:]
        yield typed
    finally:
        typed.terminal.close()


def write_in_background(terminal: Terminal, data: bytes) -> threading.Thread:
    """Write `data` to the terminal as a terminal emulator would a paste without
    bracketed paste mode: as fast as the app reads it, in pieces."""

    def write() -> None:
        for start in range(0, len(data), 4096):
            try:
                terminal.send(data[start : start + 4096])
            except OSError:  # the app quit meanwhile
                return

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def flood_text(characters: int) -> str:
    """Words, punctuation, accented letters and a line break now and then; ends
    with END on a line of its own. Ctrl+J (a line feed) is a new line in the box."""
    line = "Le café coûte 3 € — naïve 'quotes' & <tags> [link](x) ok. " * 2 + "\n"
    body = (line * (characters // len(line) + 1))[: characters - len(END) - 1]
    return f"{body}\n{END}"


def test_a_keystroke_flood_ends_with_the_exact_text_in_the_box(typing_app: Typed) -> None:
    terminal = typing_app.terminal
    text = flood_text(20_000)
    since = terminal.mark()
    started = time.monotonic()
    write_in_background(terminal, text.encode())
    # Generous: linear, this takes about a second; typed key by key into the
    # TextArea it took over a minute.
    assert terminal.wait_for(END.encode(), timeout=60, since=since)
    assert time.monotonic() - started < 30
    terminal.send(CTRL_Q)
    assert terminal.wait_exit(20) == 0
    assert typing_app.outcome()["box"] == text
    assert b"Traceback" not in terminal.output


def test_enter_after_a_flood_sends_all_of_it(typing_app: Typed) -> None:
    terminal = typing_app.terminal
    text = flood_text(5_000)
    since = terminal.mark()
    # Enter right behind the text, in the same stream: it sends everything before it.
    write_in_background(terminal, text.encode() + b"\r")
    assert terminal.wait_for(b"Noted.", timeout=60, since=since)
    terminal.send(CTRL_Q)
    assert terminal.wait_exit(20) == 0
    outcome = typing_app.outcome()
    assert outcome["sent"] == [text]
    assert outcome["box"] == ""


@pytest.mark.parametrize(
    ("keys", "box"),
    [
        (b"hello\x7f\x7fp!", "help!|"),  # Backspace twice between two runs of text
        (b"abcd\x1b[D\x1b[DX", "abX|cd"),  # Left twice, then a key typed alone
        (b"one two\x17three", "one three|"),  # Ctrl+W deletes the word before it
    ],
)
def test_keys_read_with_typed_text_act_in_order(typing_app: Typed, keys: bytes, box: str) -> None:
    # Sent in one write, as fast typing or a slow link delivers them: the
    # box's own bindings ran after the text read with them (Textual runs a
    # binding once its key has bubbled up to the app), "help!" came out "hello".
    terminal = typing_app.terminal
    terminal.send(keys)
    # Then a paste at the cursor (| in `box`), so the test knows the keys went in.
    terminal.send(b"\x1b[200~.end\x1b[201~")
    assert terminal.wait_for(b".end")
    terminal.send(CTRL_Q)
    assert terminal.wait_exit(20) == 0
    assert typing_app.outcome()["box"] == box.replace("|", ".end")


def test_text_typed_right_after_enter_stays_in_the_box(typing_app: Typed) -> None:
    # The Enter and the words after it read together: the message is sent and
    # the words stay for the next one (the box was emptied of everything once
    # the screen heard of the Enter).
    terminal = typing_app.terminal
    since = terminal.mark()
    terminal.send(b"first message\rnext words")
    assert terminal.wait_for(b"Noted.", timeout=30, since=since)
    terminal.send(CTRL_Q)
    assert terminal.wait_exit(20) == 0
    assert typing_app.outcome() == {"box": "next words", "sent": ["first message"]}


def test_a_message_being_written_at_quit_comes_back_at_the_next_start(tmp_path: Path) -> None:
    # Ctrl+Q with a draft in the box threw it away.
    unsent = tmp_path / "data" / "unsent"
    first = start_typing_driver(tmp_path)
    try:
        assert first.terminal.wait_for(MODEL_READY), first.terminal.output[-2000:]
        since = first.terminal.mark()
        first.terminal.send(b"my careful draft")
        assert first.terminal.wait_for(b"careful draft", since=since)
        first.terminal.send(CTRL_Q)
        assert first.terminal.wait_exit(20) == 0
    finally:
        first.terminal.close()
    assert [path.read_text() for path in unsent.iterdir()] == ["my careful draft"]

    again = start_typing_driver(tmp_path)
    try:
        assert again.terminal.wait_for(b"my careful draft"), again.terminal.output[-2000:]
        assert list(unsent.iterdir()) == []  # taken: a third start gets none
        again.terminal.send(CTRL_Q)
        assert again.terminal.wait_exit(20) == 0
    finally:
        again.terminal.close()
    assert again.outcome() == {"box": "my careful draft", "sent": []}
    assert b"Traceback" not in again.terminal.output


async def test_a_quit_while_the_unsent_message_is_read_keeps_it_for_the_next_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chat.ui.app
    from chat import paths

    app = make_app(SlowTokenizer(0.0))

    def read_as_a_quit_comes(*_: object) -> tuple[str, list[str]]:
        app._quit_by = time.monotonic() + 5  # Ctrl+Q while the file was read
        return "kept for later", []

    monkeypatch.setattr(chat.ui.app, "take_at_start", read_as_a_quit_comes)
    async with app.run_test() as pilot:
        await wait_for(lambda: app._typed_ahead is None, pilot)  # startup done
        assert app.query_one(PromptBox).text == ""
    [kept] = paths.unsent_dir().iterdir()
    assert kept.read_text() == "kept for later"


def test_ctrl_q_mid_flood_quits_at_once(typing_app: Typed) -> None:
    terminal = typing_app.terminal
    since = terminal.mark()
    write_in_background(terminal, b"quite a long paste, " * 10_000)  # 200,000 characters
    assert terminal.wait_for(b"quite a long paste", since=since)  # the flood is under way
    pressed = time.monotonic()
    terminal.send(CTRL_Q)
    code = terminal.wait_exit(30)
    took = time.monotonic() - pressed
    assert code == 0
    assert took < 10, f"Ctrl+Q took {took:.1f} s"  # generous: about a second here
    assert b"Traceback" not in terminal.output


def test_bytes_that_are_not_utf8_do_not_stop_the_app(typing_app: Typed) -> None:
    # A Latin-1 "é", as a terminal in another locale sends it: Textual's own
    # decoder raises, and the app stopped with a traceback.
    terminal = typing_app.terminal
    since = terminal.mark()
    terminal.send(b"caf\xe9 au lait")
    assert terminal.wait_for(b"au lait", since=since)
    terminal.send(CTRL_Q)
    assert terminal.wait_exit(20) == 0
    assert typing_app.outcome()["box"] == "caf\ufffd au lait"
    assert b"Traceback" not in terminal.output


@pytest.mark.parametrize("after_s", [0.0, 0.4])
def test_a_message_typed_while_kvchat_starts_is_sent(tmp_path: Path, after_s: float) -> None:
    # Typed right after `chat`, before the first frame (the terminal still in
    # its line mode: Enter arrives as a line feed) or during it: the text goes
    # to the prompt box, and Enter sends it once the model is ready.
    typed = start_typing_driver(tmp_path)
    terminal = typed.terminal
    try:
        # The pause is what is tested: keys that come before the first frame,
        # or while it is drawn and the model loads.
        time.sleep(after_s)
        terminal.send(b"typed ahead\r")
        assert terminal.wait_for(b"Noted.", timeout=60), terminal.output[-2000:]
        terminal.send(CTRL_Q)
        assert terminal.wait_exit(20) == 0
    finally:
        terminal.close()
    assert typed.outcome() == {"box": "", "sent": ["typed ahead"]}
    assert b"Traceback" not in terminal.output


# -- typed text as the app hands it on ------------------------------------------------


async def test_keys_and_runs_queued_together_go_in_with_one_insert() -> None:
    app = make_app(SlowTokenizer(0.0))
    async with app.run_test() as pilot:
        await ready(app, pilot)
        box = app.query_one(PromptBox)
        inserts: list[str] = []
        insert = box._replace_via_keyboard

        def recording(text: str, *where: object) -> object:
            inserts.append(text)
            return insert(text, *where)  # type: ignore[arg-type]

        box._replace_via_keyboard = recording  # type: ignore[assignment,method-assign]
        # Queued together, as a terminal delivers a paste: keys, a run, keys.
        for event in (*keys("ab"), TypedText("cd é"), *keys("f"), *ctrl_j(), *keys("g")):
            app.post_message(event)
        await wait_for(lambda: box.text == "abcd éf\ng", pilot)
        assert inserts == ["abcd éf\ng"]
        # A key typed alone still appears at once, in its own insert.
        await pilot.press("h")
        assert box.text == "abcd éf\ngh" and inserts[-1] == "h"


def keys(text: str) -> list[events.Key]:
    return TypedText(text).as_keys()


def ctrl_j() -> list[events.Key]:
    return [events.Key("ctrl+j", "\n")]


async def test_typed_text_reaches_other_widgets_as_keys() -> None:
    # Only the prompt box takes a run whole; the command palette's input gets
    # the keys, as if typed one by one.
    app = make_app(SlowTokenizer(0.0))
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await pilot.press("ctrl+p")
        await wait_for(lambda: isinstance(app.focused, Input), pilot)
        app.post_message(TypedText("theme"))
        palette_input = app.focused
        assert isinstance(palette_input, Input)
        await wait_for(lambda: palette_input.value == "theme", pilot)
        assert app.query_one(PromptBox).text == ""


# -- counting never blocks input ------------------------------------------------------


async def typing_time(pilot: Pilot[None], text: str) -> float:
    """Seconds from posting the keys of `text` (as the terminal driver does) to
    the prompt box holding them. Not `Pilot.press`: it waits until the process
    is idle, which a counting thread never lets it be."""
    box = pilot.app.query_one(PromptBox)
    expected = box.text + text
    pressed = time.monotonic()
    for key in TypedText(text).as_keys():
        pilot.app.post_message(key)
    while box.text != expected:
        assert time.monotonic() - pressed < 30, "the keys never arrived"
        await asyncio.sleep(0.005)  # a poll: the box is checked again
    return time.monotonic() - pressed


async def test_typing_while_a_huge_conversation_is_counted() -> None:
    # 20,000 messages at half a millisecond each (in Python, holding the GIL, as
    # a chat template does): about ten seconds of counting.
    engine = SlowTokenizer(0.0005)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await screen.open_conversation(big_conversation(20_000))
        meter = app.query_one(ContextMeter)
        await wait_for(lambda: screen.meter.counting(), pilot)
        assert "counting the conversation" in str(meter.render())
        box = app.query_one(PromptBox)
        assert await typing_time(pilot, "hi") < 1  # generous: milliseconds here
        # Enter while counting: nothing is sent, the text stays, the user is told.
        await pilot.press("enter")
        await wait_for(lambda: any("Still counting" in n.message for n in app.notices), pilot)
        assert screen.meter.counting()
        assert box.text == "hi" and engine.calls == []


async def counted(app: ChatApp, pilot) -> tuple[ChatScreen, ContextMeter]:  # type: ignore[no-untyped-def]
    """Once the model is ready and the meter has counted the empty draft."""
    screen = await ready(app, pilot)
    meter = app.query_one(ContextMeter)
    await wait_for(lambda: meter.state is not None, pilot)
    return screen, meter


async def test_a_long_draft_is_counted_off_the_ui_thread() -> None:
    engine = SlowTokenizer(0.0)
    app = make_app(engine, Settings())
    async with app.run_test() as pilot:
        screen, meter = await counted(app, pilot)
        engine.seconds = 2.0  # a slow count from here on
        box = app.query_one(PromptBox)
        draft = "word " * (DRAFT_SAYS_COUNTING_ABOVE // 5 + 1)
        box.insert(draft)
        await wait_for(lambda: "counting the message" in str(meter.render()), pilot)
        assert await typing_time(pilot, "x") < 1  # less than one count: not blocked by it
        engine.seconds = 0.0
        # The meter ends with the exact count of what is in the box.
        expected = screen.session.plan(draft + "x")
        assert expected is not None
        await wait_for(lambda: meter.state == MeterState.from_plan(expected), pilot)


async def test_a_slow_chat_template_never_holds_up_typing() -> None:
    """A plan renders the model's chat template, a stranger's code that may run
    up to its time limit: even a short draft in a short conversation is planned
    off the UI thread, and the meter follows."""
    engine = SlowTokenizer(0.0)
    app = make_app(engine, Settings())
    async with app.run_test() as pilot:
        screen, meter = await counted(app, pilot)
        engine.seconds = 1.0  # each plan from here on takes a second
        await typing_time(pilot, "hi")
        await wait_for(lambda: engine.slow_threads, pilot)  # a plan is under way
        assert await typing_time(pilot, " there") < 0.5
        assert threading.main_thread().name not in engine.slow_threads
        engine.seconds = 0.0
        expected = screen.session.plan("hi there")
        assert expected is not None
        await wait_for(lambda: meter.state == MeterState.from_plan(expected), pilot, 10)


async def test_plans_and_counts_ended_before_they_start_leave_no_coroutine_behind() -> None:
    """A plan replaced by a newer one, or a plan and a count cancelled as
    their screen closes, before either got to run: nothing is left made and
    never awaited (Python warns of each such coroutine when it is freed)."""
    app = make_app(SlowTokenizer(0.0), Settings())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with app.run_test() as pilot:
            screen, _ = await counted(app, pilot)
            screen.meter.refresh()
            screen.meter.refresh()  # replaces the first before it ran
            await screen.open_conversation(big_conversation(COUNT_IN_THREAD_ABOVE + 1))
            screen.meter.refresh()
            screen.workers.cancel_node(screen)  # as closing the screen does
            app.exit()
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


@pytest.mark.model
async def test_counting_a_conversation_with_the_real_model_keeps_typing_live(
    demo_model: Path,
) -> None:
    app = ChatApp(Launch(Settings(), ModelCandidate(demo_model, 0, "demo")))
    conversation = Conversation(
        messages=[
            Message("user" if i % 2 == 0 else "assistant", f"Message {i}: the sea was calm.")
            for i in range(3_000)
        ]
    )
    async with app.run_test() as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, 60)
        await screen.open_conversation(conversation)
        await wait_for(lambda: screen.meter.counting(), pilot)
        assert await typing_time(pilot, "ok") < 1
        assert screen.meter.counting(), "the count should take longer than typing"
        meter = app.query_one(ContextMeter)
        await wait_for(lambda: not screen.meter.counting() and meter.state is not None, pilot, 120)
        engine = screen.engine
        assert engine is not None
        exact = ContextBudget(engine.tokenize_chat, engine.info.n_ctx).plan(
            conversation.system_prompt,
            conversation.messages,
            "ok",
            screen.settings.sampling.max_tokens,
            screen.settings.chat.overflow,
        )
        await wait_for(lambda: meter.state == MeterState.from_plan(exact), pilot)
