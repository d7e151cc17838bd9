"""The chat app attached (as `chat --server URL` is) to a llama-server that
spreads the demo model over two rpc-servers on loopback: the window, the
meter's exact count, the server's reuse figures, and an rpc-server killed
mid-reply."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat.conversations.store import Store
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import wait_for
from tests.servers import llama_server_over_rpc
from tests.ui.conftest import app_notices, reply_on_screen, send, server_app


async def counted_then_sent(screen, pilot, text: str) -> int:  # type: ignore[no-untyped-def]
    """Type `text`, wait for the meter's count of the turn it makes, send it,
    and wait for the reply; returns what the meter counted."""
    meter = screen.query_one(ContextMeter)
    await wait_for(lambda: meter.state is not None, pilot, timeout=30)
    # What the meter shows now: the empty box's plan, or the last reply's
    # (kept until the box changes). Nothing runs between this and the insert.
    before = meter.state
    box = screen.query_one(PromptBox)
    box.focus()
    box.insert(text)

    def planned() -> bool:
        # A plan with no reply in it: the box's text's (only a plan for the
        # text the box holds is shown).
        state = meter.state
        return state is not None and state.reply == 0 and state != before

    await wait_for(planned, pilot, timeout=30)
    counted = meter.state.used
    count = len(screen.conversation.messages)
    await pilot.press("enter")
    await wait_for(
        lambda: not screen.generating and len(screen.conversation.messages) == count + 2,
        pilot,
        timeout=60,
    )
    return int(counted)


@pytest.mark.model
async def test_chat_over_two_rpc_servers(tmp_path: Path) -> None:
    with llama_server_over_rpc(tmp_path) as cluster:
        url = cluster.server.url
        app = server_app(url)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
            info = screen.engine.info
            assert info.kind == "llama-server" and info.n_ctx == 4096 and info.count_exact
            status = screen.query_one(StatusBar)
            await wait_for(lambda: f"llama-server at {url}" in str(status.render()), pilot)
            meter = screen.query_one(ContextMeter)
            assert not meter.estimated

            counted = await counted_then_sent(screen, pilot, "Name a colour.")
            first = screen.conversation.messages[-1].stats
            assert first is not None and first.generated_tokens > 0
            # What the meter showed before Enter is what the server counted.
            assert first.prompt_tokens == counted, (counted, first)
            counted = await counted_then_sent(screen, pilot, "And another?")
            second = screen.conversation.messages[-1].stats
            assert second is not None and second.prompt_tokens == counted, (counted, second)
            # The server's own figures: the earlier turn came from the KV cache
            # the rpc-servers hold.
            assert second.prompt_reused > first.prompt_tokens - 2, second
            assert second.prompt_evaluated < 25, second
            assert "≈" not in str(meter.render())

            # One of the machines goes away while a long reply streams.
            app.settings.sampling.max_tokens = 2000
            await send(pilot, "Write a very long story about a ship.")
            await wait_for(lambda: screen.generating, pilot, timeout=30)
            await wait_for(lambda: len(reply_on_screen(app)) > 40, pilot, timeout=60)
            cluster.workers[1].kill()
            await wait_for(lambda: not screen.generating, pilot, timeout=30)
            reply = screen.conversation.messages[-1]
            assert reply.stats is not None and reply.stats.finish_reason == "error"
            await wait_for(lambda: any(url in n and "kept" in n for n in app_notices(app)), pilot)
            [said] = [n for n in app_notices(app) if url in n]
            print(f"\nkvchat says: {said}")
            assert "Traceback" not in said
            kept, conv_id = reply.content, screen.conversation.id
            assert app.is_running
    assert conv_id is not None and kept.strip()
    with Store() as store:
        saved = store.get_conversation(conv_id).messages[-1]
    assert saved.content == kept and saved.stats is not None
    assert saved.stats.finish_reason == "error"
