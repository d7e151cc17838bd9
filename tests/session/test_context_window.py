"""The context window budget, with the real demo model and small windows."""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.engine.llama import LlamaEngine, load_engine
from chat.models.files import ModelCandidate
from chat.session.context_window import CACHE_SIZE, ContextBudget
from chat.settings.schema import ModelSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.context_meter import ContextMeter, bar_cells
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.message_view import MessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import turn_done
from tests.conftest import wait_for as wait_for_the_app

SYSTEM = "You are a helpful assistant."


def conversation(turns: int, words: int = 20) -> list[Message]:
    messages: list[Message] = []
    for i in range(turns):
        messages.append(Message("user", f"Question {i}: " + "tell me more " * words))
        messages.append(Message("assistant", f"Answer {i}: " + "here is more " * words))
    return messages


@pytest.fixture(scope="module")
def small_engine(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> LlamaEngine:
    log = tmp_path_factory.mktemp("log") / "llama.log"
    engine = load_engine(demo_model, ModelSettings(n_ctx=1024), log)
    yield engine
    engine.close()


@pytest.mark.parametrize("system", [SYSTEM, ""])
def test_counts_are_exact(small_engine: LlamaEngine, system: str) -> None:
    budget = ContextBudget(small_engine.tokenize_chat, small_engine.info.n_ctx)
    messages = conversation(3, words=5)
    plan = budget.plan(system, messages, "And now?", max_tokens=100, policy="drop-oldest")
    sent = ([{"role": "system", "content": system}] if system else []) + [
        m.as_chat_dict() for m in [*messages, Message("user", "And now?")]
    ]
    assert plan.left_out == ()
    assert plan.used == len(small_engine.tokenize_chat(sent, True))
    # each message's own count adds up to the whole
    counts = budget.count_messages(system, messages)
    assert plan.system + sum(counts) == len(small_engine.tokenize_chat(sent[:-1], False))


def test_policies(small_engine: LlamaEngine) -> None:
    budget = ContextBudget(small_engine.tokenize_chat, small_engine.info.n_ctx)
    messages = conversation(12)  # far more than 1,024 tokens
    total = sum(budget.count_messages(SYSTEM, messages))
    assert total > 1024

    stop = budget.plan(SYSTEM, messages, "next", max_tokens=100, policy="stop")
    assert stop.problem and "tokens too many" in stop.problem

    drop = budget.plan(SYSTEM, messages, "next", max_tokens=100, policy="drop-oldest")
    assert drop.problem is None
    assert drop.left_out[0] == 0 and drop.included[-1] == len(messages) - 1
    assert drop.used + drop.reserve <= 1024
    assert messages[drop.included[0]].role == "user"  # whole turns are left out

    middle = budget.plan(SYSTEM, messages, "next", max_tokens=100, policy="truncate-middle")
    assert middle.problem is None
    assert middle.included[:2] == (0, 1)  # the first turn stays
    assert middle.included[-1] == len(messages) - 1  # and the newest
    assert 2 in middle.left_out
    assert middle.used + middle.reserve <= 1024

    # The plan is what the model gets: exact count of what is sent.
    sent = [{"role": "system", "content": SYSTEM}] + [
        messages[i].as_chat_dict() for i in drop.included
    ]
    sent.append({"role": "user", "content": "next"})
    assert drop.used == len(small_engine.tokenize_chat(sent, True))


def test_a_message_too_long_alone_is_refused(small_engine: LlamaEngine) -> None:
    budget = ContextBudget(small_engine.tokenize_chat, small_engine.info.n_ctx)
    plan = budget.plan(SYSTEM, [], "word " * 2000, max_tokens=100, policy="drop-oldest")
    assert plan.problem and "window holds 1,024" in plan.problem


def test_keystroke_count_does_not_retokenize_history(small_engine: LlamaEngine) -> None:
    calls: list[int] = []

    def counting(messages, add_generation_prompt):  # type: ignore[no-untyped-def]
        calls.append(len(messages))
        return small_engine.tokenize_chat(messages, add_generation_prompt)

    budget = ContextBudget(counting, 1_000_000)
    messages = conversation(100)
    budget.plan(SYSTEM, messages, "a", max_tokens=100, policy="drop-oldest")
    calls.clear()
    started = time.perf_counter()
    budget.plan(SYSTEM, messages, "ab", max_tokens=100, policy="drop-oldest")
    elapsed = time.perf_counter() - started
    assert max(calls) <= 2  # only [system, new message] is rendered
    assert elapsed < 0.5  # generous; the benchmark measures the real figure


def test_a_conversation_larger_than_the_cache_is_counted_once() -> None:
    # The cache used to start over when it held 20,000 counts, halfway through
    # counting a larger conversation: every keystroke then counted it all again.
    calls: list[int] = []

    def counting(messages, add_generation_prompt):  # type: ignore[no-untyped-def]
        calls.append(len(messages))
        return list(range(sum(len(m["content"]) for m in messages)))

    budget = ContextBudget(counting, 1_000_000_000)
    messages = [Message("user", f"message {i}") for i in range(CACHE_SIZE + 5_000)]
    budget.count_messages(SYSTEM, messages)
    calls.clear()
    budget.plan(SYSTEM, messages, "typed", max_tokens=100, policy="drop-oldest")
    assert calls == [2]  # only [system, the typed message]


def test_counting_stops_when_cancelled() -> None:
    cancel = threading.Event()
    seen = 0

    def counting(messages, add_generation_prompt):  # type: ignore[no-untyped-def]
        nonlocal seen
        seen += 1
        if seen == 10:
            cancel.set()  # as the screen does when another conversation opens
        return [0] * len(messages)

    budget = ContextBudget(counting, 4096)
    counts = budget.count_messages(SYSTEM, [Message("user", str(i)) for i in range(1000)], cancel)
    assert len(counts) < 20 and seen < 20


def test_bar_cells_fill_the_width() -> None:
    cells = bar_cells(
        {"system": 5, "history": 0, "new": 1, "reply": 50, "reserved": 100, "free": 844}, 1000, 24
    )
    assert sum(count for _, count in cells) == 24
    assert ("new", 1) in cells  # tiny but visible
    assert all(name != "history" for name, _ in cells)


@pytest.mark.parametrize(
    ("sizes", "width", "used_cells"),
    [
        # A new chat: 1,044 of 8,192 used or kept for the reply, 13 %.
        ({"system": 11, "history": 0, "new": 9, "reply": 0, "reserved": 1024}, 12, 2),
        # Five segments in 41 % of the window (seen in tmux as 7 of 12 cells).
        ({"system": 40, "history": 2304, "new": 18, "reply": 118, "reserved": 906}, 12, 5),
        ({"system": 40, "history": 2304, "new": 18, "reply": 118, "reserved": 906}, 20, 8),
        # Almost full: 992 free, one cell of 12.
        ({"system": 40, "history": 6000, "new": 18, "reply": 118, "reserved": 1024}, 12, 11),
        # Over the window: no cell free.
        ({"system": 40, "history": 9000, "new": 18, "reply": 0, "reserved": 1024}, 12, 12),
    ],
)
def test_the_bar_is_as_full_as_the_window(
    sizes: dict[str, int], width: int, used_cells: int
) -> None:
    """However many segments, the bar's filled cells are the window's used
    share (a cell a segment stretched a nearly empty window to a third full)."""
    total = 8192
    free = total - sum(sizes.values())
    cells = bar_cells({**sizes, "free": max(0, free)}, total, width)
    assert sum(count for _, count in cells) == width
    assert sum(count for name, count in cells if name != "free") == used_cells
    # The largest segments are shown first; each shown takes a cell at least.
    shown = [name for name, _ in cells if name != "free"]
    largest = sorted((n for n in sizes if sizes[n]), key=lambda n: sizes[n], reverse=True)
    assert set(shown) == set(largest[: len(shown)])


# The real model needs longer than the helper's default.
wait_for = partial(wait_for_the_app, timeout=60.0)


def small_window_settings(
    n_ctx: int, policy: str = "drop-oldest", max_tokens: int = 64
) -> Settings:
    settings = Settings()
    settings.model.n_ctx = n_ctx
    settings.chat.overflow = policy
    settings.sampling.max_tokens = max_tokens
    settings.sampling.temperature = 0.0
    return settings


async def test_meter_is_exact_live_and_matches_the_kv_cache(demo_model: Path) -> None:
    app = ChatApp(Launch(small_window_settings(1024), ModelCandidate(demo_model, 0, "demo")))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot)
        meter = app.query_one(ContextMeter)
        await wait_for(lambda: meter.state is not None, pilot)
        assert meter.state is not None and meter.state.n_ctx == 1024
        box = app.query_one(PromptBox)
        box.insert("Tell me about the sea.")
        await wait_for(lambda: meter.state is not None and meter.state.new > 0, pilot)
        # Record the reply segment each time the meter grows (polling from the
        # test could miss the stream on a busy machine).
        seen: list[int] = []
        grow = meter.add_reply_tokens

        def recording(count: int, thinking: int = 0) -> None:
            grow(count, thinking)
            assert meter.state is not None
            seen.append(meter.state.reply)

        meter.add_reply_tokens = recording  # type: ignore[method-assign]
        await pilot.press("enter")
        await turn_done(screen, pilot, 2, timeout=60.0)
        reply = screen.conversation.messages[-1]
        assert reply.stats is not None
        generated = reply.stats.generated_tokens
        # the reply segment grew token by token while streaming
        assert len({n for n in seen if 0 < n < generated}) >= 3
        assert meter.state is not None and meter.state.reply == generated
        # exact: the meter's total is what llama.cpp holds, except that the last
        # sampled token is never evaluated when the reply is cut by max tokens.
        # A repeatable reply's tokens are evaluated again in the background
        # after it ends (Engine.rebatch_reply): the cache holds them once that
        # pass is done.
        assert meter.state.used == reply.stats.prompt_tokens + generated
        used = meter.state.used
        engine = screen.engine
        assert isinstance(engine, LlamaEngine)
        await wait_for(lambda: used - engine.cached_tokens in (0, 1), pilot, timeout=30)
        # every message shows its own count
        for view in app.query(MessageView):
            assert view.message.token_count or view.message.stats
        user_view = next(v for v in app.query(MessageView) if v.message.role == "user")
        assert f"{user_view.message.token_count} tokens" in str(user_view.header_text())


async def test_drop_oldest_in_the_app_marks_messages_outside(demo_model: Path) -> None:
    app = ChatApp(
        Launch(small_window_settings(512, max_tokens=48), ModelCandidate(demo_model, 0, "demo"))
    )
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot)
        for i in range(8):
            box = app.query_one(PromptBox)
            box.insert(f"Question {i}: please tell me a long story about ships and the sea.")
            await pilot.press("enter")
            await turn_done(screen, pilot, 2 * (i + 1), timeout=60.0)
        outside = [v for v in app.query(MessageView) if v.outside_window]
        assert outside, "old messages should be outside a 512-token window by now"
        assert "outside the window" in str(outside[0].header_text())
        assert screen.conversation.messages[0].content.startswith("Question 0")  # kept, not deleted
        meter = app.query_one(ContextMeter)
        assert meter.state is not None and meter.state.left_out >= 2
        # The long legend says it where it fits, the compact one at 140 columns.
        shown = str(meter.render_text())
        left_out = meter.state.left_out
        assert f"{left_out} messages outside the window" in shown or f"{left_out} left out" in shown


async def test_an_opened_conversation_marks_the_messages_the_meter_leaves_out(
    demo_model: Path,
) -> None:
    # Before any turn, the meter said "82 left out" and no header said which.
    app = ChatApp(
        Launch(small_window_settings(512, max_tokens=48), ModelCandidate(demo_model, 0, "demo"))
    )
    messages = [
        Message("user" if i % 2 == 0 else "assistant", f"Message {i}: " + "ships and the sea " * 6)
        for i in range(30)
    ]
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.chat_screen
        await wait_for_the_app(lambda: screen.engine is not None, pilot)
        assert await screen.open_conversation(Conversation(messages=messages))
        meter = app.query_one(ContextMeter)
        await wait_for_the_app(
            lambda: meter.state is not None and meter.state.left_out > 0, pilot, timeout=30
        )
        view = app.query_one(ConversationView)
        while view.earlier_count:  # the older pages, as scrolling up mounts them
            await view.show_earlier()
        await pilot.pause()
        shown = [v for v in view.message_views() if v.message.role != "system"]
        assert [v.message for v in shown] == messages
        marked = [v for v in shown if v.outside_window]
        assert len(marked) == meter.state.left_out
        assert "[outside the window: not sent]" in str(marked[0].header_text())
        assert "outside" not in str(shown[-1].header_text())


async def test_stop_policy_keeps_the_typed_message(demo_model: Path) -> None:
    app = ChatApp(
        Launch(
            small_window_settings(512, policy="stop", max_tokens=48),
            ModelCandidate(demo_model, 0, "demo"),
        )
    )
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot)

        def refused() -> bool:
            return any("tokens too many" in n.message for n in app.notices)

        sent = 0
        for i in range(12):
            text = f"Question {i}: please tell me a long story about ships and the sea."
            app.query_one(PromptBox).insert(text)
            await pilot.press("enter")
            # Either refused with a notice, or on its way: the message joined the conversation.
            await wait_for(
                lambda asked=2 * sent + 1: refused() or len(screen.conversation.messages) >= asked,
                pilot,
            )
            if refused():
                assert app.query_one(PromptBox).text == text
                break
            sent += 1
            await wait_for(lambda: not screen.generating, pilot)
        else:
            pytest.fail("the window never filled up")
        assert len(screen.conversation.messages) == 2 * sent


async def test_reply_filling_the_window_ends_with_a_note(demo_model: Path) -> None:
    settings = small_window_settings(256, max_tokens=4096)
    settings.sampling.repeat_penalty = 1.3
    app = ChatApp(Launch(settings, ModelCandidate(demo_model, 0, "demo")))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot)
        for attempt in range(3):
            app.query_one(PromptBox).insert(
                f"Write a very long story about dragon number {attempt}."
            )
            await pilot.press("enter")
            await wait_for(
                lambda: (
                    not screen.generating and screen.conversation.messages[-1].role == "assistant"
                ),
                pilot,
            )
            stats = screen.conversation.messages[-1].stats
            assert stats is not None
            if stats.finish_reason == "context_full":
                break
        assert stats.finish_reason == "context_full"
        assert any("context window is full" in n.message for n in app.notices)
        assert "context full" in str(app.query(MessageView).last().header_text())
