"""The chat app attached to a real llama-server (the demo model, on loopback):
replies stream with the server's own figures, the meter counts exactly, the
conversation records the server, reopening it elsewhere offers to reconnect,
and the palette goes back to the local model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from chat import paths
from chat.conversations.store import Store
from chat.conversations.transcript.markdown import to_markdown
from chat.models.files import ModelCandidate
from chat.session.server_choice import server_config
from chat.settings.schema import Settings
from chat.settings.values import parse_value
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.dialogs import ConfirmScreen
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import wait_for
from tests.engine.remote.fake_servers import (
    FakeServer,
    RawServer,
    Route,
    Stream,
    openai_routes,
    serve,
    vllm_routes,
)
from tests.servers import RunningServer, free_port, llama_cpp_server, llama_server
from tests.ui.conftest import app_notices, reply_on_screen, run_command, send, server_app


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with llama_server(tmp_path_factory.mktemp("llama-server")) as running:
        yield running


async def turn(screen, pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    count = len(screen.conversation.messages)
    await send(pilot, text)
    await wait_for(
        lambda: not screen.generating and len(screen.conversation.messages) == count + 2,
        pilot,
        timeout=60,
    )


@pytest.mark.model
async def test_chat_on_a_llama_server(server: RunningServer, demo_model: Path) -> None:
    app = server_app(server.url)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        info = screen.engine.info
        assert info.kind == "llama-server" and info.n_ctx == 4096 and info.count_exact
        status = app.chat_screen.query_one(StatusBar)
        await wait_for(lambda: "llama-server at http://127.0.0.1" in str(status.render()), pilot)
        await turn(screen, pilot, "Name a colour.")
        first = screen.conversation.messages[-1].stats
        assert first is not None and first.generated_tokens > 0
        # The meter counted exactly what the server evaluated.
        assert first.prompt_tokens == first.prompt_evaluated
        await turn(screen, pilot, "And another?")
        second = screen.conversation.messages[-1].stats
        assert second is not None
        # The server's own figures: the earlier turn came from its cache.
        assert second.prompt_reused > first.prompt_tokens - 2, second
        assert second.prompt_evaluated < 25, second
        meter = screen.query_one(ContextMeter)
        assert not meter.estimated and "≈" not in str(meter.render())
        conv_id = screen.conversation.id
    assert conv_id is not None
    with Store() as store:
        saved = store.get_conversation(conv_id)
    assert saved.backend == "llama-server"
    assert saved.server_url == server.url
    # No model file: the URL made a path was saved as one ("http:/127.0.0.1:…").
    assert saved.model_path == ""
    exported = to_markdown(saved)
    assert "http:/1" not in exported and f"**Server:** llama-server at {server.url}" in exported

    # Reopened with the local model loaded: kvchat offers to reconnect.
    local = Settings()
    app = ChatApp(
        Launch(local, ModelCandidate(demo_model, demo_model.stat().st_size, "demo"), resume=conv_id)
    )
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(
            lambda: isinstance(app.screen, ConfirmScreen) and bool(app.screen.query("#yes")),
            pilot,
            timeout=60,
        )
        assert "llama-server" in str(app.screen.query_one(".dialog-text").render())
        await pilot.press("enter")  # "Reconnect to the server" has the focus
        await wait_for(
            lambda: screen.engine is not None and screen.engine.info.kind == "llama-server",
            pilot,
            timeout=60,
        )
        assert app.settings.server.url == server.url
        # ...and the palette goes back to the local model.
        await run_command(pilot, "use the local", "Use the local model")
        await wait_for(
            lambda: screen.engine is not None and screen.engine.info.kind == "local",
            pilot,
            timeout=60,
        )
        assert app.settings.server.url is None


@pytest.mark.model
async def test_a_server_that_is_down_says_so_then_reconnects(tmp_path: Path) -> None:
    """The server is down at start: the app opens and names the URL; once it is
    up, "Reconnect to the model server" in the palette attaches to it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    app = server_app(url)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.is_mounted, pilot)
        notice = screen.query_one("#notice")
        await wait_for(lambda: "error" in notice.classes, pilot, timeout=30)
        text = str(notice.render())
        assert url in text, text
        with llama_server(tmp_path, port=port):
            await run_command(pilot, "reconnect", "Reconnect to the model server")
            await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
            assert screen.engine.info.kind == "llama-server"
            assert not notice.display
            await turn(screen, pilot, "Hello?")


@pytest.mark.model
async def test_the_settings_pane_connects_to_a_server_and_back(
    server: RunningServer, demo_model: Path
) -> None:
    """Server URL in the settings pane, Apply: the chat goes on with the served
    model; settings the server ignores are marked; a blank URL goes back."""
    from chat.ui.screens.settings import SettingsScreen
    from tests.ui.conftest import open_pane, set_field

    settings = Settings()
    settings.sampling.max_tokens = 24
    app = ChatApp(Launch(settings, ModelCandidate(demo_model, demo_model.stat().st_size, "demo")))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "server.url", server.url)
        await pilot.click("#apply")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        await wait_for(
            lambda: screen.engine is not None and screen.engine.info.kind == "llama-server",
            pilot,
            timeout=60,
        )
        await turn(screen, pilot, "Hi there")
        assert screen.conversation.messages[-1].stats is not None
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "server.url", "")
        await pilot.click("#apply")
        await wait_for(
            lambda: screen.engine is not None and screen.engine.info.kind == "local",
            pilot,
            timeout=60,
        )


@pytest.mark.model
async def test_a_server_killed_mid_reply_keeps_the_partial_reply_and_ctrl_l_continues_it(
    tmp_path: Path,
) -> None:
    port = free_port()
    with llama_server(tmp_path, port=port) as doomed:
        app = server_app(doomed.url)
        app.settings.sampling.max_tokens = 2000
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
            await send(pilot, "Write a very long story about a ship.")
            await wait_for(lambda: screen.generating, pilot, timeout=30)
            # Some of the story streams (on a loaded machine the server may
            # still be reading the prompt after a couple of seconds).
            await wait_for(lambda: len(reply_on_screen(app)) > 40, pilot, timeout=60)
            doomed.kill()
            await wait_for(lambda: not screen.generating, pilot, timeout=30)
            reply = screen.conversation.messages[-1]
            assert reply.stats is not None and reply.stats.finish_reason == "error"
            # Notices travel as messages to the app: the one said may not be
            # handled yet when the reply's end is.
            await wait_for(
                lambda: any(doomed.url in n and "Ctrl+L continues" in n for n in app_notices(app)),
                pilot,
            )
            kept, conv_id = reply.content, screen.conversation.id
            assert conv_id is not None and kept
            with Store() as store:
                saved = store.get_conversation(conv_id).messages[-1]
            assert saved.content == kept and saved.stats is not None
            assert saved.stats.finish_reason == "error"

            # The server is back (same address): Ctrl+L goes on in the same message.
            with llama_server(tmp_path, port=port):
                app.settings.sampling.max_tokens = 40
                await pilot.press("ctrl+l")
                await wait_for(lambda: screen.generating, pilot, timeout=30)
                await wait_for(lambda: not screen.generating, pilot, timeout=60)
                messages = screen.conversation.messages
                continued = messages[-1]
                assert len(messages) == 2 and continued.id == reply.id
                assert continued.content.startswith(kept) and len(continued.content) > len(kept)
                assert continued.stats is not None and continued.stats.finish_reason != "error"
    with Store() as store:
        saved = store.get_conversation(conv_id).messages[-1]
    assert saved.content == continued.content


# -- faults while sending (issue 27): no real model needed, fake servers on loopback ----------


@pytest.mark.parametrize("routes", [vllm_routes, openai_routes], ids=["vllm", "openai"])
async def test_sending_to_a_server_that_went_down_keeps_the_message_in_the_box(
    routes: Callable[[], dict[tuple[str, str], Route]],
) -> None:
    """vLLM counts on the server (the send itself asks it); a generic server
    is estimated here, so the reply's request is the first to fail. Either
    way: one sentence naming the server, the app goes on, the text stays."""
    server = serve(routes())
    app = server_app(server.url)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=30)
        port = server.port
        server.stop()
        await send(pilot, "Are you there?")
        box = screen.query_one(PromptBox)
        await wait_for(
            lambda: not screen.generating and any(server.url in n for n in app_notices(app)),
            pilot,
            timeout=30,
        )
        await wait_for(lambda: box.text == "Are you there?", pilot)
        assert [m for m in screen.conversation.messages if m.role != "system"] == []
        [said] = [n for n in app_notices(app) if server.url in n]
        assert "Traceback" not in said and said.count(". ") <= 1, said
        assert app.is_running
        # Once it is back, the same text is sent with Enter.
        back = FakeServer(routes())
        back.start(port)
        try:
            await pilot.press("enter")
            await wait_for(lambda: len(screen.conversation.messages) >= 2, pilot, timeout=30)
            await wait_for(lambda: not screen.generating, pilot, timeout=30)
            assert screen.conversation.messages[-1].content == "Hello there, friend."
        finally:
            back.stop()


@asynccontextmanager
async def app_on(
    routes: dict[tuple[str, str], Route],
) -> AsyncIterator[tuple[ChatApp, Any, FakeServer]]:
    """The app attached to a fake server with `routes`, its engine ready:
    the app, its pilot and the server."""
    server = serve(routes)
    try:
        app = server_app(server.url)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=30)
            yield app, pilot, server
    finally:
        server.stop()


async def test_a_chat_api_that_drops_mid_reply_keeps_it_and_promises_no_ctrl_l() -> None:
    """A server whose chat API cannot continue a message (any but llama-server):
    the reply so far is kept, and the notice does not offer Ctrl+L."""
    async with app_on(openai_routes(drop=True)) as (app, pilot, server):
        await send(pilot, "Hello?")
        await wait_for(lambda: any("kept" in n for n in app_notices(app)), pilot)
        [said] = [n for n in app_notices(app) if "kept" in n]
        assert "Ctrl+L" not in said, said
        reply = app.chat_screen.conversation.messages[-1]
        assert reply.content and reply.stats is not None
        assert reply.stats.finish_reason == "error"
        # Ctrl+L says why not, before any request (a chat API closes the message).
        asked = len(server.seen)
        await pilot.press("ctrl+l")
        await wait_for(lambda: "not on openai" in app_notices(app)[-1], pilot)
        assert len(server.seen) == asked and not app.chat_screen.generating
        # A refusal (a warning), not a turn that failed (an error).
        assert [n.severity for n in app.notices if "not on openai" in n.message] == ["warning"]
        assert app.chat_screen.conversation.messages[-1].content == reply.content


async def test_a_server_answering_garbage_to_a_send_keeps_the_message() -> None:
    routes = openai_routes()
    routes[("POST", "/v1/chat/completions")] = lambda _: Stream([b"data: \x1b[2J not json"])
    async with app_on(routes) as (app, pilot, server):
        screen = app.chat_screen
        await send(pilot, "Hello?")
        box = screen.query_one(PromptBox)
        await wait_for(lambda: box.text == "Hello?" and not screen.generating, pilot)
        [said] = [n for n in app_notices(app) if server.url in n]
        assert "malformed" in said and "\x1b" not in said, said
        assert app.is_running


async def test_a_server_that_is_not_http_is_not_called_down() -> None:
    raw = RawServer(b"garbage\r\n\r\n")
    try:
        app = server_app(raw.url)
        async with app.run_test(size=(120, 40)) as pilot:
            notice = app.chat_screen.query_one("#notice")
            await wait_for(lambda: "error" in notice.classes, pilot, timeout=30)
            text = str(notice.render())
            assert "not HTTP" in text and "Nothing answers" not in text, text
    finally:
        raw.stop()


async def test_a_hostile_model_name_never_reaches_the_status_bar() -> None:
    name = "m\x1b]0;pwned\x07\x1b[2J\u202eevil"
    server = serve(openai_routes(model_entry={"id": name, "object": "model"}))
    try:
        app = server_app(server.url)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await wait_for(lambda: screen.engine is not None, pilot, timeout=30)
            await wait_for(lambda: "evil" in str(screen.query_one(StatusBar).render()), pilot)
            status = str(screen.query_one(StatusBar).render())
            assert not any(c in status for c in "\x1b\x07\u202e"), repr(status)
    finally:
        server.stop()


async def test_credentials_in_the_url_are_nowhere_on_screen_or_in_the_database() -> None:
    server = serve(openai_routes())
    host = server.url.removeprefix("http://")
    try:
        settings = Settings()
        settings.server.url = parse_value("server.url", f"http://me:hunter2@{host}")  # type: ignore[assignment]
        config = server_config(settings.server, {})
        assert config is not None
        app = ChatApp(Launch(settings, ModelCandidate.for_server(config)))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await wait_for(lambda: screen.engine is not None, pilot, timeout=30)
            await turn(screen, pilot, "Hi")
            assert server.last("/v1/chat/completions").headers["Authorization"].startswith("Basic ")
            bar = screen.query_one(StatusBar)
            status = str(bar.render())  # at 120 columns the address is cut for "…F1"
            assert "hunter2" not in status and "me@" not in status
            shown = bar.full_text()  # all of it, as the help (F1) lists it
            assert host in shown and "hunter2" not in shown and "me@" not in shown
            conv_id = screen.conversation.id
            # The settings pane shows the URL as the setting holds it: without them.
            from tests.ui.conftest import open_pane

            pane = await open_pane(app, pilot)
            assert pane.field("server.url").control.value == f"http://{host}"
        assert conv_id is not None
        with Store() as store:
            saved = store.get_conversation(conv_id)
        assert saved.server_url == f"http://{host}"
        dump = b"".join(p.read_bytes() for p in Path(paths.data_dir()).rglob("*") if p.is_file())
        assert b"hunter2" not in dump
    finally:
        server.stop()


@pytest.mark.model
@pytest.mark.parametrize("launch", [llama_server, llama_cpp_server], ids=["llama-server", "python"])
async def test_sending_after_a_real_server_was_killed_keeps_the_message(
    tmp_path: Path, launch: Callable[[Path], AbstractContextManager[RunningServer]]
) -> None:
    """A real server (llama-server counts on the server, inside Enter;
    llama-cpp-python's is estimated here) killed between two turns."""
    with launch(tmp_path) as doomed:
        app = server_app(doomed.url)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
            await turn(screen, pilot, "Name a colour.")
            doomed.kill()
            sent = len(screen.conversation.messages)
            await send(pilot, "And another?")
            box = screen.query_one(PromptBox)
            await wait_for(
                lambda: box.text == "And another?" and not screen.generating, pilot, timeout=30
            )
            said = [n for n in app_notices(app) if doomed.url in n]
            assert said and "Nothing answers" in said[-1], said
            assert len(screen.conversation.messages) == sent and app.is_running
            # The palette's reconnect says what happens next ("Connected to the
            # server already." read as if nothing had failed).
            await run_command(pilot, "reconnect", "Reconnect to the model server")
            await wait_for(lambda: "the next message goes to it" in app_notices(app)[-1], pilot)


async def test_switching_to_a_server_that_is_down_keeps_the_draft_and_the_server() -> None:
    """The settings pane's URL, Apply, to a server that is down: one sentence,
    the chat goes on with the server it had, the draft stays in the box."""
    from chat.ui.screens.settings import SettingsScreen
    from tests.ui.conftest import open_pane, set_field

    server = serve(openai_routes())
    dead = f"http://127.0.0.1:{free_port()}"
    try:
        app = server_app(server.url)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.chat_screen
            await wait_for(lambda: screen.engine is not None, pilot, timeout=30)
            box = screen.query_one(PromptBox)
            box.insert("half a thought")
            pane = await open_pane(app, pilot)
            await set_field(pane, pilot, "server.url", dead)
            await pilot.click("#apply")
            await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
            await wait_for(lambda: any(dead in n for n in app_notices(app)), pilot, timeout=30)
            await wait_for(lambda: screen.engine is not None, pilot, timeout=30)
            assert box.text == "half a thought" and app.is_running
            assert app.settings.server.url == server.url
            # The draft is sent to the server still in use.
            await turn(screen, pilot, "")
            assert [m.content for m in screen.conversation.messages[-2:]] == [
                "half a thought",
                "Hello there, friend.",
            ]
    finally:
        server.stop()
