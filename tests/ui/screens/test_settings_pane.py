"""The settings pane (F2): built from FIELDS, validated as the user types,
applied live (sampling reaches the next engine call, model settings reload the
model), and saved to the config file. Driven with Pilot on scripted engines;
the determinism rules are checked on the real model at the end."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Select, Static, Switch, TextArea

from chat import paths
from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import Store
from chat.engine.llama import LlamaEngine
from chat.errors import ModelError
from chat.models import files as model_files
from chat.models import table as model_table
from chat.models.catalog import ModelEntry
from chat.models.files import ModelCandidate
from chat.settings.config_file import backup_path, load_config
from chat.settings.resolve import resolve_settings
from chat.settings.schema import FIELDS, FieldSpec, ModelSettings, SamplingSettings, Settings
from chat.settings.values import get_value
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.settings import SettingsScreen
from chat.ui.widgets.message_view import MessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.setting_field import SettingField
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import open_pane, ready, run_command, send, set_field

NUMERIC = [spec for spec in FIELDS.values() if spec.kind in ("int", "float", "optional_int")]


def ids(spec: FieldSpec) -> str:
    return spec.key


@pytest.fixture(autouse=True)
def no_model_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pane lists models found on the machine; tests see none but their own."""
    monkeypatch.setattr(model_files, "list_models", lambda config_model=None: [])
    monkeypatch.setattr(model_table, "find_models", lambda roots=None: [])


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    """A file that passes the GGUF magic check (the scripted engines never read it)."""
    path = tmp_path / "models" / "fake.gguf"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"GGUF" + bytes(64))
    return path


class TrackedEngine(ScriptedEngine):
    """A scripted engine that records being closed, and whether a call was running then."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.closed = False
        self.closed_while_busy = False

    def close(self) -> None:
        if self._lock.acquire(blocking=False):
            self._lock.release()
        else:
            self.closed_while_busy = True
        self.closed = True


class Factory:
    """An engine factory: a new TrackedEngine per load (n_ctx as asked), or a
    ModelError when `fail` says so; `gate` holds loads until it is set."""

    def __init__(
        self,
        fail: Callable[[ModelSettings], bool] = lambda settings: False,
        gate: threading.Event | None = None,
        **engine_kwargs: object,
    ) -> None:
        self.fail = fail
        self.gate = gate
        self.engine_kwargs = engine_kwargs
        self.loads: list[tuple[Path, ModelSettings]] = []
        self.engines: list[TrackedEngine] = []

    def __call__(self, path: Path, settings: ModelSettings) -> TrackedEngine:
        self.loads.append((path, copy.deepcopy(settings)))
        if self.gate is not None and len(self.loads) > 1:
            self.gate.wait(10)
        if self.fail(settings):
            raise ModelError(f"Could not load the model {path}: failed to allocate the context.")
        kwargs = {"n_ctx": settings.n_ctx or 4096, **self.engine_kwargs}
        engine = TrackedEngine(**kwargs)
        self.engines.append(engine)
        return engine


def found(path: Path) -> ModelEntry:
    return ModelEntry(path, path.name, "test", path.stat().st_size, (path,))


def candidate(path: Path) -> ModelCandidate:
    return ModelCandidate(path, path.stat().st_size, "test")


def make_app(
    gguf: Path,
    factory: Callable[[Path, ModelSettings], ScriptedEngine] | None = None,
    settings: Settings | None = None,
    **kwargs: object,
) -> ChatApp:
    settings = settings or Settings()
    settings.model.path = str(gguf)
    return ChatApp(
        Launch(settings, candidate(gguf), **kwargs),
        engine_factory=factory or scripted_factory(ScriptedEngine()),
    )


def save_button(pane: SettingsScreen) -> Button:
    return pane.query_one("#save", Button)


def error_text(field: SettingField) -> str:
    labels = field.query(".setting-error").results(Static)
    return " ".join(str(label.render()) for label in labels if label.display)


async def save(pane: SettingsScreen, pilot) -> None:  # type: ignore[no-untyped-def]
    assert not save_button(pane).disabled
    await pilot.click("#save")
    await wait_for(lambda: not isinstance(pilot.app.screen, SettingsScreen), pilot)
    await pilot.pause()


def typed(spec: FieldSpec, value: float) -> str:
    return str(value) if spec.kind == "float" else str(int(value))


async def finished_turns(app: ChatApp, pilot, count: int) -> None:  # type: ignore[no-untyped-def]
    await turn_done(app.chat_screen, pilot, 2 * count)


# --- the form -------------------------------------------------------------------


async def test_every_field_is_shown_with_value_range_help_and_a_fitting_widget(
    gguf: Path,
) -> None:
    settings = Settings()
    settings.sampling.temperature = 0.3
    settings.sampling.stop = ["END", "###"]
    app = make_app(gguf, settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        fields = list(pane.query(SettingField))
        assert [f.spec.key for f in fields if f.spec.section == "sampling"] == [
            k for k in FIELDS if k.startswith("sampling.")
        ]
        assert {f.spec.key for f in fields} == set(FIELDS)
        for field in fields:
            spec = field.spec
            assert field.value == get_value(settings, spec.key)
            texts = " ".join(str(s.render()) for s in field.query("Label, Static"))
            assert spec.help in texts and spec.range_text() in texts
            expected: type = {
                "float": Input,
                "int": Input,
                "optional_int": Input,
                "str": Input,
                "bool": Switch,
                "choice": Select,
                "text": TextArea,
                "str_list": TextArea,
                "optional_path": Input,
                "optional_str": Input,
            }[str(spec.kind)]
            if spec.key in ("model.path", "ui.theme"):
                expected = Select
            assert isinstance(field.control, expected), spec.key
        # Current values are what the widgets show.
        assert pane.field("sampling.temperature").control.value == "0.3"
        assert pane.field("sampling.stop").control.text == "END\n###"
        assert pane.field("sampling.seed").control.value == ""
        assert pane.field("sampling.seed").control.placeholder == "random each reply"
        assert pane.field("model.path").control.value == str(gguf)
        sections = [str(s.render()) for s in pane.query(".section-title").results(Static)]
        assert sections[:3] == ["Sampling", "Chat", "Model"]


async def test_model_file_lists_what_list_models_finds_plus_the_current_path(
    gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(20))
    monkeypatch.setattr(model_table, "find_models", lambda roots=None: [found(other), found(gguf)])
    app = make_app(gguf)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        select = pane.field("model.path").control
        assert isinstance(select, Select)
        values = [value for _, value in select._options]
        assert values == ["", str(gguf), str(other)]  # automatic, current, then found


@pytest.mark.parametrize("spec", NUMERIC, ids=ids)
async def test_numeric_bounds_in_the_pane(spec: FieldSpec, gguf: Path) -> None:
    assert spec.minimum is not None and spec.maximum is not None
    step = 0.001 if spec.kind == "float" else 1
    below = spec.minimum - step
    while below in spec.special_values():
        below -= step
    app = make_app(gguf)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        last_valid: object = None
        for inside in (spec.minimum, spec.maximum, *spec.special_values()):
            last_valid = inside
            raw = "" if inside is None else typed(spec, float(inside))  # type: ignore[arg-type]
            field = await set_field(pane, pilot, spec.key, raw)
            assert field.error is None, field.error
            assert not field.has_class("invalid")
            assert error_text(field) == ""
            assert field.value == inside
            assert not save_button(pane).disabled
        for outside in (below, spec.maximum + step):
            field = await set_field(pane, pilot, spec.key, typed(spec, outside))
            assert field.error is not None
            assert "out of range" in field.error and spec.range_text() in field.error
            assert field.has_class("invalid")
            assert field.error in error_text(field)
            assert save_button(pane).disabled
            assert pane.query_one("#apply", Button).disabled
            assert spec.key in str(pane.query_one("#settings-summary", Static).render())
            assert field.value == last_valid  # never the bad one
        # Not a number at all.
        field = await set_field(pane, pilot, spec.key, "abc")
        assert field.error is not None and "not a" in field.error
        # Fixed again: Save comes back.
        await set_field(pane, pilot, spec.key, typed(spec, spec.maximum))
        assert not save_button(pane).disabled
        # Save with a bad value does nothing; Save enabled again applies.
        await set_field(pane, pilot, spec.key, typed(spec, spec.maximum + step))
        pane.action_save()
        await pilot.pause()
        assert app.screen is pane
        assert get_value(app.settings, spec.key) == spec.default
        await set_field(pane, pilot, spec.key, typed(spec, spec.maximum))
        await save(pane, pilot)
        if spec.section != "model":  # model settings go through a reload, tested below
            assert get_value(app.settings, spec.key) == spec.maximum


async def test_other_kinds_in_the_pane(gguf: Path) -> None:
    app = make_app(gguf)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        # str_list: one per line or comma separated, blank entries dropped.
        field = await set_field(pane, pilot, "sampling.stop", "END\n\n###\n")
        assert field.value == ["END", "###"] and field.error is None
        field = await set_field(pane, pilot, "sampling.stop", "a,b")
        assert field.value == ["a", "b"]
        # text: anything, blank included.
        field = await set_field(pane, pilot, "chat.system_prompt", "")
        assert field.value == "" and field.error is None
        field = await set_field(pane, pilot, "chat.system_prompt", "  two\nlines ")
        assert field.value == "  two\nlines "
        # bool and choices.
        field = await set_field(pane, pilot, "chat.record_token_probs", False)
        assert field.value is False
        field = await set_field(pane, pilot, "sampling.mirostat_mode", 2)
        assert field.value == 2
        field = await set_field(pane, pilot, "chat.overflow", "stop")
        assert field.value == "stop"
        # The model file: blank means "find one automatically".
        field = await set_field(pane, pilot, "model.path", "")
        assert field.value is None
        assert not save_button(pane).disabled


async def test_number_fields_refuse_letters_while_typing(gguf: Path) -> None:
    app = make_app(gguf)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        temperature = pane.field("sampling.temperature").control
        assert isinstance(temperature, Input)
        temperature.focus()
        temperature.value = ""
        await pilot.press("x", "1", ".", "5", "e")
        assert temperature.value == "1.5e"  # an exponent is on its way
        seed = pane.field("sampling.seed").control
        assert isinstance(seed, Input)
        seed.focus()
        await pilot.press("-", "a", "4", "2")
        assert seed.value == "42"
        assert pane.field("sampling.seed").value == 42
        layers = pane.field("model.n_gpu_layers").control
        assert isinstance(layers, Input)
        layers.focus()
        layers.value = ""
        await pilot.press("-", "1")
        assert layers.value == "-1"  # -1 = all layers


async def test_typing_9_then_0_3_as_a_user_would(gguf: Path) -> None:
    engine = ScriptedEngine()
    app = make_app(gguf, scripted_factory(engine))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        field = pane.field("sampling.temperature")
        assert field.control.has_focus  # the first field is focused
        await pilot.press("ctrl+a", "ctrl+k", "9")
        assert "out of range" in error_text(field)
        assert save_button(pane).disabled
        await pilot.press("backspace", "0", ".", "3")
        assert error_text(field) == ""
        await pilot.press("ctrl+s")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        await send(pilot, "hello")
        await finished_turns(app, pilot, 1)
        assert engine.calls[-1][1].temperature == 0.3


async def test_reset_to_defaults_per_section(gguf: Path) -> None:
    settings = Settings()
    settings.sampling.top_k = 7
    settings.chat.system_prompt = "Be brief."
    app = make_app(gguf, settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "99")
        await set_field(pane, pilot, "sampling.stop", "END")
        assert save_button(pane).disabled
        pane.query_one("#reset-sampling", Button).press()
        await pilot.pause()
        for key, spec in FIELDS.items():
            if spec.section == "sampling":
                field = pane.field(key)
                assert field.value == spec.default and field.error is None
                assert not field.has_class("invalid")
        assert pane.field("sampling.temperature").control.value == "0.8"
        assert pane.field("sampling.stop").control.text == ""
        assert not save_button(pane).disabled
        # Other sections are untouched.
        assert pane.field("chat.system_prompt").value == "Be brief."
        await save(pane, pilot)
        assert app.settings.sampling == SamplingSettings()
        assert app.settings.chat.system_prompt == "Be brief."


async def test_cancel_and_escape_change_nothing(gguf: Path) -> None:
    app = make_app(gguf)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "0.1")
        await pilot.click("#cancel")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.top_k", "3")
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        assert app.settings == Settings(model=replace(ModelSettings(), path=str(gguf)))


async def test_command_palette_opens_the_pane(gguf: Path) -> None:
    settings = Settings()
    settings.sampling.temperature = 0.3
    app = make_app(gguf, settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await run_command(pilot, "settings", "Settings")
        await wait_for(lambda: isinstance(app.screen, SettingsScreen), pilot)
        pane = app.screen
        assert isinstance(pane, SettingsScreen)
        await pilot.pause()
        # The pane shows the settings in use.
        assert pane.field("sampling.temperature").control.value == "0.3"
        assert pane.field("model.path").control.value == str(gguf)


# --- live: sampling and the system prompt -------------------------------------------


async def test_sampling_changes_reach_the_next_engine_call(gguf: Path) -> None:
    engine = ScriptedEngine(replies=[["one"], ["two"], ["three"]])
    app = make_app(gguf, scripted_factory(engine))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await send(pilot, "first")
        await finished_turns(app, pilot, 1)
        assert engine.calls[0][1] == SamplingSettings()
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "0.3")
        await set_field(pane, pilot, "sampling.top_k", "5")
        await set_field(pane, pilot, "sampling.seed", "42")
        await set_field(pane, pilot, "sampling.stop", "END\n###")
        await set_field(pane, pilot, "sampling.mirostat_mode", 2)
        await save(pane, pilot)  # no config file: applied for this session
        await send(pilot, "second")
        await finished_turns(app, pilot, 2)
        expected = SamplingSettings(
            temperature=0.3, top_k=5, seed=42, stop=["END", "###"], mirostat_mode=2
        )
        assert engine.calls[1][1] == expected
        assert any("applied for this session" in n.message for n in app.notices)
        # Apply (without saving) works the same, and the seed goes back to random.
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.seed", "")
        await pilot.click("#apply")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        await send(pilot, "third")
        await finished_turns(app, pilot, 3)
        assert engine.calls[2][1] == replace(expected, seed=None)


async def test_system_prompt_new_conversations_and_an_empty_one(gguf: Path) -> None:
    engine = ScriptedEngine(replies=[["ok"]])
    app = make_app(gguf, scripted_factory(engine))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        # No messages yet: the current conversation takes it at once.
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "chat.system_prompt", "You are a pirate.")
        await save(pane, pilot)
        views = list(app.query(MessageView))
        assert [v.message.content for v in views] == ["You are a pirate."]
        await send(pilot, "hi")
        await finished_turns(app, pilot, 1)
        assert engine.calls[-1][0][0] == {"role": "system", "content": "You are a pirate."}
        # A conversation under way keeps the prompt its replies were made with.
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "chat.system_prompt", "You are a poet.")
        await save(pane, pilot)
        assert any("applies to new conversations" in n.message for n in app.notices)
        await send(pilot, "again")
        await finished_turns(app, pilot, 2)
        assert engine.calls[-1][0][0]["content"] == "You are a pirate."
        # ... and a new conversation uses the new one.
        await pilot.press("ctrl+n")
        await pilot.pause()
        await send(pilot, "new")
        await wait_for(lambda: len(engine.calls) == 3 and not screen.generating, pilot)
        assert engine.calls[-1][0][0] == {"role": "system", "content": "You are a poet."}


# --- live: reloading the model ------------------------------------------------------


async def test_model_change_reloads_in_the_background_and_the_chat_continues(
    gguf: Path,
) -> None:
    gate = threading.Event()
    factory = Factory(gate=gate, replies=[["a reply"]])
    app = make_app(gguf, factory)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        old = factory.engines[0]
        await send(pilot, "before")
        await finished_turns(app, pilot, 1)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "model.n_ctx", "2048")
        await set_field(pane, pilot, "model.n_batch", "128")
        await save(pane, pilot)
        # Loading: visible in the status bar; sending waits; the chat stays.
        status = app.query_one(StatusBar)
        await wait_for(lambda: "Reloading model fake" in status.full_text(), pilot)
        await send(
            pilot, "during"
        )  # waits for the new model (tests/ui/screens/test_waiting_message.py)
        assert len(list(app.query(MessageView))) == 3  # system, user, assistant
        assert not old.closed
        gate.set()
        await wait_for(lambda: screen.engine is not None, pilot)
        new = factory.engines[1]
        assert screen.engine is new and app.models.engine is new
        assert factory.loads[1][1] == ModelSettings(path=str(gguf), n_ctx=2048, n_batch=128)
        # ModelStatus.ready sets the engine before it redraws the status bar.
        await wait_for(lambda: "2,048 ctx" in status.full_text(), pilot)
        await wait_for(lambda: old.closed, pilot)
        assert not old.closed_while_busy
        assert app.settings.model.n_ctx == 2048
        # The conversation continues on the new model, history and all: the
        # message that waited is sent.
        await finished_turns(app, pilot, 2)
        assert [m["content"] for m in new.calls[0][0]] == [
            Settings().chat.system_prompt,
            "before",
            "a reply",
            "during",
        ]


async def test_only_sampling_changes_do_not_reload(gguf: Path) -> None:
    factory = Factory(replies=[["same model"]])
    app = make_app(gguf, factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "0.5")
        await save(pane, pilot)
        # Said once the settings are applied; a reload would have begun by then.
        await wait_for(
            lambda: any("applied for this session" in n.message for n in app.notices),
            pilot,
        )
        assert "Reloading" not in app.query_one(StatusBar).full_text()
        await send(pilot, "still you?")  # no "No model is loaded yet": it answers at once
        await finished_turns(app, pilot, 1)
        (engine,) = factory.engines
        assert engine.calls[0][1].temperature == 0.5
        assert len(factory.loads) == 1


async def test_failed_reload_keeps_the_old_engine_and_says_why(gguf: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    factory = Factory(fail=lambda settings: settings.n_ctx == 1_048_576)
    engine_replies = [["still here"]]
    factory.engine_kwargs["replies"] = engine_replies
    app = make_app(gguf, factory, config_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        old = factory.engines[0]
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "model.n_ctx", "1048576")
        await set_field(pane, pilot, "sampling.temperature", "0.2")
        await save(pane, pilot)
        await wait_for(lambda: any("failed to allocate" in n.message for n in app.notices), pilot)
        note = next(n for n in app.notices if "failed to allocate" in n.message)
        assert note.severity == "error"
        assert "Still using scripted" in note.message and "not saved" in note.message
        assert screen.engine is old and app.models.engine is old and not old.closed
        assert app.settings.model.n_ctx == 0
        assert "4,096 ctx" in app.query_one(StatusBar).full_text()
        # The file has the sampling change but not the model setting that failed.
        saved, problems = load_config(path)
        assert problems == []
        assert saved.sampling.temperature == 0.2 and saved.model.n_ctx == 0
        await send(pilot, "still there?")
        await finished_turns(app, pilot, 1)
        assert old.calls and screen.conversation.messages[-1].content == "still here"


async def test_broken_model_file_is_refused_and_the_old_engine_kept(
    gguf: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_text("not a model")
    factory = Factory()
    app = make_app(gguf, factory)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        old = factory.engines[0]
        pane = await open_pane(app, pilot)
        pane.field("model.path").set_value(str(broken))  # as if picked from the list
        pane.field("model.path").check()
        await save(pane, pilot)
        await wait_for(lambda: any("Not a GGUF" in n.message for n in app.notices), pilot)
        assert screen.engine is old and not old.closed
        assert app.settings.model.path == str(gguf)
        assert len(factory.loads) == 1


async def test_model_change_while_a_reply_streams_stops_it_first(gguf: Path) -> None:
    factory = Factory(replies=[[f"w{i} " for i in range(2000)]], delay=0.005)
    app = make_app(gguf, factory)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        old = factory.engines[0]
        await send(pilot, "go")
        await wait_for(lambda: old.started.is_set(), pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "model.n_ctx", "1024")
        await save(pane, pilot)
        await wait_for(lambda: screen.engine is not None and len(factory.engines) == 2, pilot)
        await wait_for(lambda: old.closed, pilot)
        assert not old.closed_while_busy  # one engine call at a time
        reply = screen.conversation.messages[-1]
        assert reply.stats is not None and reply.stats.finish_reason == "stopped"
        assert reply.content.startswith("w0 ")  # what it wrote is kept
        assert any("Stopping the reply" in n.message for n in app.notices)


async def test_picking_a_model_when_none_was_found_loads_it(gguf: Path) -> None:
    factory = Factory()
    app = ChatApp(Launch(Settings(), None), engine_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.chat_screen.engine is None
        pane = await open_pane(app, pilot)
        select = pane.field("model.path")
        select.set_value(str(gguf))
        await save(pane, pilot)
        await wait_for(lambda: app.chat_screen.engine is not None, pilot)
        assert factory.loads[0][0] == gguf
        assert not app.query_one("#notice").display


# --- the seed -----------------------------------------------------------------------


async def test_pin_last_seed_from_the_command_palette(gguf: Path) -> None:
    engine = ScriptedEngine(replies=[["one"], ["two"]])
    app = make_app(gguf, scripted_factory(engine))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        app.chat_screen.action_pin_seed()
        await pilot.pause()
        assert any("no seed to pin" in n.message for n in app.notices)
        await send(pilot, "x")
        await finished_turns(app, pilot, 1)
        assert engine.calls[0][1].seed is None
        await run_command(pilot, "pin last seed", "Pin last seed")
        await wait_for(lambda: app.settings.sampling.seed == 1234, pilot)  # the scripted seed
        assert any("Seed pinned to 1234" in n.message for n in app.notices)
        await pilot.press("ctrl+r")
        await wait_for(lambda: len(engine.calls) == 2 and not screen.generating, pilot)
        assert engine.calls[1][1].seed == 1234
        pane = await open_pane(app, pilot)
        assert pane.field("sampling.seed").control.value == "1234"
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        app.chat_screen.action_random_seed()
        assert app.settings.sampling.seed is None


# --- persistence --------------------------------------------------------------------


async def test_save_writes_the_config_file(gguf: Path, tmp_path: Path) -> None:
    path = tmp_path / "config" / "config.toml"
    app = make_app(gguf, config_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "0.3")
        await set_field(pane, pilot, "sampling.stop", "END")
        await set_field(pane, pilot, "chat.record_token_probs", False)
        await save(pane, pilot)
        assert any(f"saved to {path}" in n.message for n in app.notices)
    saved, problems = load_config(path)
    assert problems == []
    assert saved.sampling.temperature == 0.3 and saved.sampling.stop == ["END"]
    assert saved.chat.record_token_probs is False
    assert saved.model.path == str(gguf)
    assert not backup_path(path).exists()


async def test_with_a_preset_only_what_was_changed_becomes_a_default(
    gguf: Path, tmp_path: Path
) -> None:
    # The pane shows the conversation's values, a preset's here: saving a
    # change of top_p wrote the preset's temperature to config.toml as the
    # user's own (docs/presets.md: "Your defaults do not change").
    path = tmp_path / "config" / "config.toml"
    app = make_app(gguf, config_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await run_command(pilot, "coder", "Use preset: coder")
        await wait_for(lambda: screen.settings.sampling.temperature == 0.2, pilot)
        pane = await open_pane(app, pilot)
        # The pane says which values are the conversation's, and the defaults.
        help_line = pane.query_one("#setting-sampling-temperature .setting-help", Static)
        assert "This conversation's value (preset coder); your default, 0.8," in str(
            help_line.render()
        )
        top_k_help = pane.query_one("#setting-sampling-top-k .setting-help", Static)
        assert "This conversation" not in str(top_k_help.render())
        await set_field(pane, pilot, "sampling.top_p", "0.9")
        await save(pane, pilot)
        # The conversation keeps its preset and takes the change; the
        # defaults take only the change.
        assert (screen.settings.sampling.temperature, screen.settings.sampling.top_p) == (0.2, 0.9)
        assert screen.settings.sampling.min_p == 0.1
        defaults = app.settings.sampling
        assert (defaults.temperature, defaults.top_p, defaults.min_p) == (0.8, 0.9, 0.05)
    saved, problems = load_config(path)
    assert problems == []
    assert (saved.sampling.temperature, saved.sampling.top_p) == (0.8, 0.9)
    assert saved.sampling.min_p == SamplingSettings().min_p


async def test_apply_does_not_write(gguf: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    app = make_app(gguf, config_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "0.3")
        await pilot.click("#apply")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen), pilot)
        assert app.settings.sampling.temperature == 0.3
    assert not path.exists()


async def test_a_successful_reload_saves_the_model_settings(gguf: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    factory = Factory()
    app = make_app(gguf, factory, config_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "model.n_ctx", "2048")
        await save(pane, pilot)
        await wait_for(
            lambda: screen.engine is factory.engines[-1] is not factory.engines[0], pilot
        )
        # The model settings are written once the new model is in place, as it says.
        await wait_for(lambda: any("Model loaded" in n.message for n in app.notices), pilot)
        saved_notes = [n.message for n in app.notices if "Settings saved to" in n.message]
        assert len(saved_notes) == 2 and "once the model has loaded" in saved_notes[0]
    saved, _ = load_config(path)
    assert saved.model.n_ctx == 2048


BROKEN_CONFIGS = {
    "syntax": "[sampling]\ntemperature = = 1\n",
    "out_of_range": "[sampling]\ntemperature = 9\ntop_k = 12\n",
    "unknown_key": "[sampling]\ntemprature = 0.5\n",
    "wrong_type": '[model]\nn_ctx = "big"\n',
    "not_utf8": b"[chat]\nsystem_prompt = '\xff'\n",
}


@pytest.mark.parametrize("kind", list(BROKEN_CONFIGS))
async def test_broken_config_app_starts_and_saving_keeps_a_backup(
    kind: str, gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI's own wiring: problems shown, app usable, Save keeps a .bak."""
    from chat import paths
    from chat.cli import main as cli

    path = paths.config_file()
    path.parent.mkdir(parents=True)
    original = BROKEN_CONFIGS[kind]
    if isinstance(original, bytes):
        path.write_bytes(original)
    else:
        path.write_text(original)
    before = path.read_bytes()
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    started: list[ChatApp] = []
    monkeypatch.setattr(ChatApp, "run", lambda self, **kw: started.append(self))
    assert cli.main(["--model", str(gguf)]) == 0
    (app,) = started
    assert app.config_path == path and app.config_had_problems
    app.models.factory = scripted_factory(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.pause()
        assert any(str(path) in n.message for n in app.notices)  # problems shown
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.top_p", "0.5")
        await save(pane, pilot)
        assert any(".bak" in n.message for n in app.notices)
        # A second save must not replace the user's file in the backup.
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.top_p", "0.6")
        await save(pane, pilot)
    assert backup_path(path).read_bytes() == before
    saved, problems = load_config(path)
    assert problems == [] and saved.sampling.top_p == 0.6
    # --model was for this run: not written.
    assert saved.model.path is None
    if kind == "out_of_range":
        assert saved.sampling.top_k == 12  # the good entries of the file are kept


async def test_values_from_flags_and_environment_are_for_this_run_only(
    gguf: Path, tmp_path: Path
) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[sampling]\ntemperature = 0.7\ntop_k = 20\nseed = 5\n")
    resolved = resolve_settings(
        path,
        {"sampling.temperature": "0.1", "sampling.top_k": None},
        {"KVCHAT_SEED": "99", "KVCHAT_SAMPLING_MIN_P": "0.2"},
    )
    overrides = {
        key: resolved.origins[key]
        for key, source in resolved.sources.items()
        if source in ("cli", "env")
    }
    assert overrides == {
        "sampling.temperature": "--temperature",
        "sampling.seed": "KVCHAT_SEED",
        "sampling.min_p": "KVCHAT_SAMPLING_MIN_P",
    }
    app = ChatApp(
        Launch(resolved.settings, candidate(gguf), config_path=path, run_overrides=overrides),
        engine_factory=scripted_factory(ScriptedEngine()),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        # The pane shows the values in effect, and says where they came from.
        field = pane.field("sampling.temperature")
        assert field.value == 0.1
        assert "Set by --temperature for this run." in str(
            field.query_one(".setting-help", Static).render()
        )
        await set_field(pane, pilot, "sampling.top_k", "30")  # from the file: saved
        await set_field(pane, pilot, "sampling.seed", "7")  # from env, changed: saved
        await save(pane, pilot)
        assert app.settings.sampling.temperature == 0.1  # still in effect for this run
    saved, _ = load_config(path)
    assert saved.sampling.temperature == 0.7  # the file keeps its own value
    assert saved.sampling.min_p == SamplingSettings().min_p  # env value not written
    assert saved.sampling.top_k == 30
    assert saved.sampling.seed == 7


async def test_a_flag_given_with_continue_applies_to_the_conversation_reopened(
    gguf: Path,
) -> None:
    # `chat --continue --max-tokens 40` kept the conversation's own 400, silently.
    saved = Conversation(title="old")
    saved.messages = [Message("user", "q"), Message("assistant", "a")]
    with Store(paths.database_file()) as store:
        conv_id = store.import_conversation(
            saved, {"max_tokens": 400, "temperature": 0.3, "seed": 3}
        )
        other_id = store.import_conversation(saved, {"max_tokens": 500})
    settings = Settings()
    settings.sampling.max_tokens = 40
    settings.sampling.seed = 9
    app = make_app(
        gguf,
        settings=settings,
        resume=conv_id,
        run_overrides={"sampling.max_tokens": "--max-tokens", "sampling.seed": "KVCHAT_SEED"},
    )
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: screen.conversation.id == conv_id, pilot)
        sampling = screen.settings.sampling
        # The flag wins; its own other values stay; a variable (a shell's
        # profile, not typed for this conversation) does not.
        assert (sampling.max_tokens, sampling.temperature, sampling.seed) == (40, 0.3, 3)
        await wait_for(lambda: any("command line" in n.message for n in app.notices), pilot)
        [told] = [n.message for n in app.notices if "command line" in n.message]
        assert (
            told == "From the command line, for this conversation too: max_tokens 40 (it had 400)."
        )
        # Another opened later (Ctrl+O) keeps its own.
        assert await screen.open_conversation(other_id)
        assert screen.settings.sampling.max_tokens == 500


async def test_a_config_that_cannot_be_written_is_reported(gguf: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / "config.toml"  # its folder is a file
    app = make_app(gguf, config_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "sampling.temperature", "0.3")
        await save(pane, pilot)
        assert any("Cannot save" in n.message for n in app.notices)
        assert app.settings.sampling.temperature == 0.3  # still applied


def test_setting_field_module_and_pane_import_no_llama() -> None:
    import subprocess
    import sys

    code = (
        "import sys, chat.ui.screens.settings, chat.ui.widgets.setting_field; "
        "print('llama_cpp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the real model: determinism and reloading ------------------------------------------


def real_app(demo_model: Path, settings: Settings) -> ChatApp:
    return ChatApp(Launch(settings, candidate(demo_model)))


async def real_reply(app: ChatApp, pilot, text: str | None = None) -> str:  # type: ignore[no-untyped-def]
    """Send `text` (or regenerate with Ctrl+R when None) and return the new reply."""
    screen = app.chat_screen
    before = screen.conversation.messages[-1] if screen.conversation.messages else None
    if text is None:
        await pilot.press("ctrl+r")
    else:
        await send(pilot, text)

    def done() -> bool:
        messages = screen.conversation.messages
        return (
            bool(messages)
            and messages[-1].role == "assistant"
            and messages[-1] is not before
            and not screen.generating
        )

    await wait_for(done, pilot, timeout=120)
    reply = screen.conversation.messages[-1]
    assert reply.content.strip() and reply.stats is not None
    return reply.content


def sampling(**changes: object) -> Settings:
    settings = Settings()
    settings.model.n_ctx = 2048
    settings.sampling = replace(settings.sampling, max_tokens=40, **changes)  # type: ignore[arg-type]
    return settings


PROMPT = "Write a short poem about the sea."


@pytest.mark.model
async def test_real_model_greedy_regenerate_gives_the_same_reply(demo_model: Path) -> None:
    app = real_app(demo_model, sampling(temperature=0.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        first = await real_reply(app, pilot, PROMPT)
        again = await real_reply(app, pilot)
        assert again == first


@pytest.mark.model
async def test_real_model_fixed_seed_regenerate_gives_the_same_reply(demo_model: Path) -> None:
    app = real_app(demo_model, sampling(temperature=1.0, seed=1234))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        first = await real_reply(app, pilot, PROMPT)
        again = await real_reply(app, pilot)
        assert again == first
        assert app.chat_screen.conversation.messages[-1].stats.seed == 1234  # type: ignore[union-attr]


@pytest.mark.model
async def test_real_model_random_seeds_give_different_replies(demo_model: Path) -> None:
    app = real_app(demo_model, sampling(temperature=1.5))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        replies = [await real_reply(app, pilot, PROMPT)]
        for _ in range(3):
            replies.append(await real_reply(app, pilot))
            if replies[-1] != replies[0]:
                break
        assert len(set(replies)) > 1, replies


@pytest.mark.model
async def test_real_model_pinning_the_last_seed_repeats_that_reply(demo_model: Path) -> None:
    app = real_app(demo_model, sampling(temperature=1.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        first = await real_reply(app, pilot, PROMPT)
        seed = app.chat_screen.conversation.messages[-1].stats.seed  # type: ignore[union-attr]
        assert seed is not None
        app.chat_screen.action_pin_seed()
        assert app.settings.sampling.seed == seed
        again = await real_reply(app, pilot)
        assert again == first
        assert app.chat_screen.conversation.messages[-1].stats.seed == seed  # type: ignore[union-attr]


@pytest.mark.model
async def test_real_model_reload_and_a_failed_reload(demo_model: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(range(256)) * 4)  # the magic, then nonsense
    app = real_app(demo_model, sampling(temperature=0.0))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=120)
        first_engine = screen.engine
        await real_reply(app, pilot, "Say hello.")
        # A smaller window: reloaded, the conversation stays and continues.
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "model.n_ctx", "1024")
        await save(pane, pilot)
        await wait_for(
            lambda: screen.engine is not None and screen.engine is not first_engine,
            pilot,
            timeout=120,
        )
        assert screen.engine.info.n_ctx == 1024  # type: ignore[union-attr]
        status = app.query_one(StatusBar)
        await wait_for(lambda: "1,024 ctx" in status.full_text(), pilot)
        await real_reply(app, pilot, "Say goodbye.")
        assert len(screen.conversation.messages) == 4
        # A broken model file: the running model stays, and the user is told why.
        second_engine = screen.engine
        pane = await open_pane(app, pilot)
        pane.field("model.path").set_value(str(broken))
        await save(pane, pilot)
        await wait_for(
            lambda: any(n.title == "Model reload failed" for n in app.notices),
            pilot,
            timeout=120,
        )
        note = next(n for n in app.notices if n.title == "Model reload failed")
        assert "broken.gguf" in note.message and "Still using" in note.message
        assert screen.engine is second_engine
        assert app.settings.model.path is None  # still "find one automatically"
        await real_reply(app, pilot, "Still there?")


@pytest.mark.model
async def test_real_model_key_cache_type_changed_in_the_pane(demo_model: Path) -> None:
    app = real_app(demo_model, sampling(temperature=0.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        first = app.chat_screen.engine
        assert isinstance(first, LlamaEngine) and first.key_cache_type == "q8_0"
        pane = await open_pane(app, pilot)
        await set_field(pane, pilot, "model.cache_type_k", "f16")
        await save(pane, pilot)
        await wait_for(lambda: app.chat_screen.engine not in (None, first), pilot, timeout=120)
        engine = app.chat_screen.engine
        assert isinstance(engine, LlamaEngine) and engine.key_cache_type == "f16"
        assert await real_reply(app, pilot, PROMPT)


@pytest.mark.model
async def test_real_model_a_pause_before_enter_starts_the_reply_at_once(demo_model: Path) -> None:
    app = real_app(demo_model, sampling(temperature=1.0, seed=1234))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=120)
        engine = screen.engine
        assert isinstance(engine, LlamaEngine)
        app.query_one(PromptBox).insert(PROMPT)
        # The pause: the message is evaluated in the background.
        await wait_for(lambda: engine.cached_tokens > 0 and not engine._prefilling, pilot, 60)
        await pilot.press("enter")
        await wait_for(
            lambda: len(screen.conversation.messages) == 2 and not screen.generating, pilot, 120
        )
        first = screen.conversation.messages[-1]
        # Nothing left to evaluate: sampled from logits llama.cpp already held.
        assert first.stats is not None and first.stats.prompt_evaluated == 0
        again = await real_reply(app, pilot)  # regenerate: evaluated the usual way
        assert again == first.content
