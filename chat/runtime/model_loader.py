"""Loading and reloading the model: the one owner of the engine.

States: no model chosen (NONE), the first load under way (LOADING), a model
ready (READY), a replacement loading while the old one stays in memory
(RELOADING), the first load failed (FAILED). A reload that fails keeps the
model that was loaded; a model that replaces another is in place before the
old one is closed.

Loading runs in a background thread (chat.runtime.background); its outcome is
handed to `report` from that thread, and the owner of the loader (the app)
passes it back to `accept` on its own thread. No Textual here.

Quitting (`close`) frees every model the loader holds, each once no call uses
it; a load that cannot be interrupted frees its model itself when it ends.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from chat.engine.protocol import Engine
from chat.errors import ChatTemplateError, KvchatError, ModelError
from chat.models.files import ModelCandidate, how_to_get_a_model, pick_model, same_path
from chat.runtime.background import start_thread
from chat.settings.schema import FIELDS, ModelSettings
from chat.settings.server import ServerConfig

EngineFactory = Callable[[Path, ModelSettings], Engine]
ServerFactory = Callable[[ServerConfig], Engine]

# Model settings the engine is loaded with: changing one of them means a reload.
LOADER_FIELDS: tuple[str, ...] = tuple(
    spec.name for spec in FIELDS.values() if spec.section == "model" and spec.name != "path"
)


class LoadState(Enum):
    NONE = "none"
    LOADING = "loading"
    READY = "ready"
    RELOADING = "reloading"
    FAILED = "failed"


@dataclass(frozen=True)
class ModelReady:
    """A load finished: `engine` runs `model` with `settings`."""

    engine: Engine
    model: ModelCandidate
    settings: ModelSettings
    reload: bool = False
    """It was loaded to replace the model (settings changed), not at start."""
    save: bool = False
    """The settings pane asked to save the settings once the model loaded."""


@dataclass(frozen=True)
class ModelFailed:
    """A load failed; `error` says why, in words."""

    error: str
    model: ModelCandidate
    reload: bool = False
    save: bool = False
    template_failed: bool = False
    """The model's chat template cannot be used (and plain ChatML was not
    asked for): the user may agree to plain ChatML and load it again."""


LoadOutcome = ModelReady | ModelFailed


@dataclass(frozen=True)
class Reload:
    """What a change of model settings loads."""

    model: ModelCandidate
    settings: ModelSettings


class ModelBusyError(ModelError):
    """A model is still loading; another change has to wait for it."""


class NoModelFoundError(ModelError):
    """No model file is set and none was found; the message says how to get one."""


def connect_to_server(server: ServerConfig) -> Engine:
    # Imported here: the HTTP library is paid for only when a server is used.
    from chat.engine.remote import connect

    return connect(server)


def load_llama(path: Path, settings: ModelSettings) -> Engine:
    # Imported here so that the UI starts drawing before llama.cpp is imported.
    from chat import paths
    from chat.engine.llama import load_engine

    engine = load_engine(path, settings, paths.log_file())
    engine.choose_threads(settings, spare_core=True)  # the app's UI needs a core
    return engine


class ModelLoader:
    def __init__(
        self,
        report: Callable[[LoadOutcome], object],
        factory: EngineFactory = load_llama,
        server_factory: ServerFactory = connect_to_server,
    ) -> None:
        self._report = report
        self.factory = factory
        self.server_factory = server_factory
        self.state = LoadState.NONE
        self.engine: Engine | None = None
        """The model in use (READY, or RELOADING: still loaded, no new replies)."""
        self.model: ModelCandidate | None = None
        """The file of the model loaded, or being loaded at first."""
        self._closed = False
        self._arrived: list[Engine] = []
        """Engines loaded and reported, not yet accepted: `close` frees them too."""
        self._handover = threading.Lock()
        """Orders a load that ends against `close`: each model is freed once."""

    @property
    def busy(self) -> bool:
        return self.state in (LoadState.LOADING, LoadState.RELOADING)

    @property
    def usable_engine(self) -> Engine | None:
        """The engine replies may use now: none while another model loads."""
        return self.engine if self.state is LoadState.READY else None

    def load(self, model: ModelCandidate, settings: ModelSettings) -> None:
        """Load `model` at start, in the background; the outcome goes to `report`."""
        self.state = LoadState.LOADING
        self.model = model
        start_thread("load", self._load, model, copy.deepcopy(settings), False, False)

    def begin_reload(self) -> None:
        """A reload is under way from now: no new replies, and another change of
        model settings waits for it (`plan_reload` refuses it)."""
        self.state = LoadState.RELOADING if self.engine is not None else LoadState.LOADING

    def reload(self, plan: Reload, *, save: bool = False) -> None:
        """Load `plan.model` to replace the model in use (see `begin_reload`)."""
        self.begin_reload()
        start_thread("reload", self._load, plan.model, copy.deepcopy(plan.settings), True, save)

    def _load(
        self, model: ModelCandidate, settings: ModelSettings, reload: bool, save: bool
    ) -> None:
        try:
            if model.server is not None:
                engine = self.server_factory(model.server)
            else:
                engine = self.factory(model.path, settings)
        except ChatTemplateError as error:
            offer = not settings.plain_template
            self._report(ModelFailed(str(error), model, reload, save, template_failed=offer))
        except KvchatError as error:
            self._report(ModelFailed(str(error), model, reload, save))
        except Exception as error:  # llama.cpp failures we did not foresee
            where = model.name if model.server is not None else model.path
            reason = f"Could not load the model {where}: {error}"
            self._report(ModelFailed(reason, model, reload, save))
        else:
            with self._handover:
                if not self._closed:
                    self._arrived.append(engine)
                    self._report(ModelReady(engine, model, settings, reload, save))
                    return
            _close_quietly(engine)  # the app quit while it loaded

    def accept(self, outcome: LoadOutcome) -> bool:
        """Take a finished load's outcome (on the owner's thread). False when it
        is not to be used: the loader was closed meanwhile (the app quit; `close`
        freed its model)."""
        with self._handover:
            if isinstance(outcome, ModelReady) and outcome.engine in self._arrived:
                self._arrived.remove(outcome.engine)
            if self._closed:
                return False
        if isinstance(outcome, ModelFailed):
            self.state = LoadState.READY if self.engine is not None else LoadState.FAILED
            return True
        old = self.engine
        self.engine, self.model, self.state = outcome.engine, outcome.model, LoadState.READY
        if old is not None and old is not outcome.engine:
            # After the new one is in place; close() waits for any call still running.
            start_thread("close-model", _close_quietly, old)
        return True

    def plan_reload(
        self, current: ModelSettings, new: ModelSettings, server: ServerConfig | None = None
    ) -> Reload | None:
        """What changing the model settings from `current` to `new` (and to
        `server`, None: the local model) loads, or None when nothing needs
        loading (the same file under another name, settings the engine does not
        load with, the server in use). Raises `ModelError` when it cannot be
        done: a load under way, a model file that cannot be used, or none found."""
        loaded_server = self.model.server if self.model is not None else None
        if server is not None and server == loaded_server and self.engine is not None:
            return None  # connected to it already
        if server is None and loaded_server is None and new == current:
            return None
        if self.busy:
            raise ModelBusyError(
                "A model is still loading: change the model settings again when it is ready."
            )
        if server is not None:  # another server, or the same one again after it failed
            return Reload(ModelCandidate.for_server(server), copy.deepcopy(new))
        candidate = pick_model(None, new.path)
        if candidate is None:
            raise NoModelFoundError(how_to_get_a_model())
        same_file = (
            self.model is not None
            and loaded_server is None
            and same_path(candidate.path, self.model.path)
        )
        same_loader = all(getattr(new, name) == getattr(current, name) for name in LOADER_FIELDS)
        if same_file and same_loader and self.engine is not None:
            return None
        return Reload(candidate, copy.deepcopy(new))

    def close(self, timeout: float) -> bool:
        """The app is quitting: free the model in use, and one loaded but not yet
        accepted, once no call uses it (a reply ends within a token; see
        `Engine.close`); a load still running frees its model when it ends.

        Returns False when a model is still in use after `timeout` seconds (a
        prompt being evaluated cannot be interrupted): it is freed when that call
        ends, or with the process."""
        with self._handover:
            self._closed = True
            engines = [engine for engine in (self.engine, *self._arrived) if engine is not None]
            self.engine, self._arrived = None, []
        closing = [start_thread("close-model", _close_quietly, engine) for engine in engines]
        deadline = time.monotonic() + timeout
        for thread in closing:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in closing)


def _close_quietly(engine: Engine) -> None:
    # The engine is gone either way; the app carries on.
    with contextlib.suppress(Exception):
        engine.close()
