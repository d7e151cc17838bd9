"""The model as the chat screen shows it: loading (the status bar, a notice
under the conversation and a loading indicator), ready, reloading, or a
problem panel; and what a ready or failed model means for the message that
waited for it.

The app reports the model loader's outcomes here (down by call); whatever
follows for the conversation is asked of the turn and of the conversation
flow, which the screen was given.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.screen import Screen
from textual.widgets import LoadingIndicator, Static

from chat.engine.protocol import Engine
from chat.session.turn import Turn
from chat.ui.meter_planner import MeterPlanner
from chat.ui.untrusted import shown
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.status_bar import StatusBar


class ModelStatus:
    def __init__(
        self,
        screen: Screen[None],
        turn: Turn,
        meter: MeterPlanner,
        ready: Callable[[], object],
    ) -> None:
        """`ready`: called each time a model is ready (the conversation flow's
        offer of the model a conversation was made with)."""
        self._screen = screen
        self._turn = turn
        self._meter = meter
        self._ready = ready

    def _notice(self) -> Static:
        return self._screen.query_one("#notice", Static)

    async def loading(self, name: str, *, server: bool = False) -> None:
        """`name` loads (`server`: kvchat connects to the model server `name`)."""
        doing = f"Connecting to {name}" if server else f"Loading model {name}"
        self._screen.query_one(StatusBar).show_loading(doing)
        notice = self._notice()
        notice.update(shown(f"{doing}…  You can type meanwhile: Enter sends once it is ready."))
        notice.set_classes("loading")
        notice.display = True
        await self._screen.mount(LoadingIndicator(id="loading"), before=notice)

    async def ready(self, engine: Engine) -> None:
        """`engine` (the loader's) is ready: replies can be sent."""
        screen = self._screen
        await self._remove_loading()
        self._notice().display = False
        screen.query_one(StatusBar).show_model(engine.info)
        # A server that cannot count before sending (Ollama, generic ones): ≈.
        screen.query_one(ContextMeter).estimated = not engine.info.count_exact
        self._meter.recount()
        self._turn.schedule_prefill()  # for what was typed while the model loaded
        # After the caller (the app, taking the model in) is done with it.
        screen.call_later(self._turn.send_waiting)
        self._ready()

    def reloading(self, name: str, *, server: bool = False) -> None:
        """Another model is loading to replace this one: no replies until `ready`
        (or `problem`); the conversation stays as it is."""
        self._screen.query_one(StatusBar).show_reloading(
            f"Connecting to {name}" if server else f"Reloading model {name}"
        )

    async def problem(self, text: str, *, no_model: bool = False) -> None:
        """An error panel (a model that failed to load, or no model at all)."""
        await self._remove_loading()
        notice = self._notice()
        notice.update(Content(text))
        notice.set_classes("no-model" if no_model else "error")
        notice.display = True
        self._screen.query_one(StatusBar).show_no_model(
            "no model loaded" if no_model else "model failed to load"
        )
        if self._turn.take_back_waiting() is not None:
            self._screen.notify(
                "The model did not load, so your message was not sent: it is back in the box.",
                severity="warning",
                timeout=10,
            )

    async def _remove_loading(self) -> None:
        for indicator in self._screen.query("#loading"):
            await indicator.remove()
