"""Quitting is safe at every moment: Ctrl+Q while the model loads, while typing
(a prefill), right after Enter, while a reply streams or is saved, with a
dialog open, or while a big conversation's tokens are counted. The real
`chat` command runs in a pseudo-terminal with the real demo model
(tests/ui/app/quit_driver.py), a hundred times; each must exit with status 0 and
print no traceback.

Before: quitting mid-reply exited while the reply's thread was inside
llama.cpp (the exit unloaded the library under it: SIGSEGV), and Enter then
Ctrl+Q removed the widgets under the handler that was mounting the reply
(NoMatches traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chat import paths
from chat.conversations.store import Store
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.app.quit_driver import run_many, spread
from tests.ui.conftest import make_app, ready, reply_on_screen, send

QUIT_RUNS = 100
PARALLEL = 3
"""Runs at a time: each waits for the screen part of its time."""


class ClosableEngine(ScriptedEngine):
    closed_while_replying: bool | None = None
    """None: never closed."""

    def close(self) -> None:
        self.closed_while_replying = self._lock.locked()


async def test_quitting_mid_reply_saves_it_as_stopped_then_frees_the_model() -> None:
    engine = ClosableEngine(replies=[[f"w{i} " for i in range(2000)]], delay=0.01)
    app = make_app(engine)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await wait_for(lambda: app.store is not None, pilot)
        await send(pilot, "go")
        await wait_for(lambda: "w0 w1" in reply_on_screen(app), pilot)
        await pilot.press("ctrl+q")
    assert app.return_code == 0
    assert engine.closed_while_replying is False
    with Store(paths.database_file()) as store:
        conv_id = store.latest_conversation_id()
        assert conv_id is not None
        reply = store.get_conversation(conv_id).messages[-1]
    assert reply.role == "assistant" and reply.content.startswith("w0 w1")
    assert reply.stats is not None and reply.stats.finish_reason == "stopped"


@pytest.mark.model
@pytest.mark.timeout(1500)  # about 250 s here: many real starts and quits
def test_quitting_at_random_moments_never_crashes(demo_model: Path) -> None:
    # One llama.cpp thread each: three runs share two cores. Many more runs,
    # other seeds, kvchat's own threads: python -m tests.ui.app.quit_driver --help
    runs = run_many(QUIT_RUNS, PARALLEL, seed=15, threads=1)
    print("\n" + spread(runs))  # the moments hit (pytest -s shows them)
    failed = [run for run in runs if run.problem]
    assert not failed, "\n\n".join(
        f"{run.moment} ({run.hit}): {run.problem}\n{run.output[-2000:]}" for run in failed
    )
