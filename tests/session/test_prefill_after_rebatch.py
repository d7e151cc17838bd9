"""A pause in typing while a reply is evaluated again in the background (a
repeatable reply: `Engine.rebatch_reply`): the engine is busy with that, and
a prefill then would do nothing; it runs once the rebatch ends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from chat.engine.protocol import ChatMessages
from chat.engine.tool_calls.calls import ToolDefinition
from chat.settings.schema import Settings
from tests.fakes import ScriptedEngine
from tests.session.test_turn import Recorded


class BusyRebatch(ScriptedEngine):
    """A rebatch that lasts until `rebatch_done` is set; a prefill meanwhile
    finds the engine busy, as the llama.cpp engine's does."""

    def __init__(self) -> None:
        super().__init__(replies=[["Blue", "."]])
        self.rebatching = threading.Event()
        self.rebatch_done = threading.Event()
        self.busy_prefills = 0

    def rebatch_reply(self) -> bool:
        self.rebatching.set()
        self.rebatch_done.wait(10)
        self.rebatching.clear()
        return super().rebatch_reply()

    def prefill(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        exact: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> bool:
        if self.rebatching.is_set():
            self.busy_prefills += 1
            return False
        return super().prefill(messages, add_generation_prompt, exact, tools)


async def rebatching(engine: BusyRebatch) -> Recorded:
    """A reply has ended and is being evaluated again; "And at night?" is
    typed, and the pause in typing comes."""
    settings = Settings()
    settings.sampling.seed = 3  # repeatable: the reply is evaluated again after it ends
    settings.chat.prefill = True
    recorded = Recorded(engine, settings=settings)
    turn = recorded.turn
    assert turn.send("Sky colour?") is None
    await asyncio.wait_for(turn.stopped(), 10)
    await recorded.until(engine.rebatching.is_set)
    turn.typed = lambda: "And at night?"
    turn.prefill_now()
    return recorded


async def test_a_prefill_during_a_rebatch_runs_after_it() -> None:
    engine = BusyRebatch()
    recorded = await rebatching(engine)
    await asyncio.sleep(0.2)
    assert not engine.prefills and not engine.busy_prefills
    engine.rebatch_done.set()
    await recorded.until(lambda: engine.prefills)
    assert engine.prefills[-1][-1] == {"role": "user", "content": "And at night?"}
    assert engine.prefill_exact[-1]  # as the repeatable reply will evaluate it
    assert engine.busy_prefills == 0 and engine.rebatches == 1


async def test_a_reply_sent_meanwhile_drops_the_waiting_prefill() -> None:
    engine = BusyRebatch()
    recorded = await rebatching(engine)
    turn = recorded.turn
    engine.rebatch_done.set()  # the scripted reply waits for nothing
    assert turn.send("And at night?") is None
    turn.typed = lambda: ""  # sent: the box is empty again
    await asyncio.wait_for(turn.stopped(), 10)
    await recorded.until(lambda: engine.rebatches == 2)
    # Sent before the prefill could run: the prefill waiting is not run after it.
    assert not engine.prefills
