"""The model picker (F8): every GGUF found, filtered as you type, Enter
switches to it; Ctrl+D downloads one from a Hugging Face Hub (a local mirror on
loopback) and switches to it. A scripted engine stands in for llama.cpp."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static

from chat.models.files import demo_model_path
from chat.settings.schema import Settings
from chat.ui.screens.model_picker import ModelPickerScreen
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.models.hub_mirror import Hub, running_hub
from tests.models.test_download import REPO, _model
from tests.ui.conftest import make_app, ready


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Hub]:
    from huggingface_hub import constants

    files = {"tiny-Q4_K_M.gguf": _model(300_000, 1), "tiny-Q8_0.gguf": _model(200_000, 2)}
    with running_hub(Hub(files={REPO: files})) as running:
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        yield running


async def _open_picker(app, pilot) -> ModelPickerScreen:  # type: ignore[no-untyped-def]
    await pilot.press("f8")
    await wait_for(lambda: isinstance(app.screen, ModelPickerScreen), pilot)
    picker = app.screen
    table = picker.query_one(DataTable)
    await wait_for(lambda: table.row_count > 0, pilot, timeout=20)
    return picker


async def test_the_picker_lists_filters_and_switches() -> None:
    demo = demo_model_path()
    assert demo is not None
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        picker = await _open_picker(app, pilot)
        table = picker.query_one(DataTable)
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert any("SmolLM2-135M-Instruct" in name for name in names), names
        row = next(
            table.get_row_at(i)
            for i in range(table.row_count)
            if "SmolLM2" in str(table.get_row_at(i)[0])
        )
        assert str(row[1]).endswith("ctx")  # the memory it needs, at the context asked for
        assert [str(cell) for cell in row[2:7]] == ["93.8 MiB", "135M", "Q4_1", "8,192", "chatml"]
        status = picker.query_one("#models-status", Static)
        assert " models · memory at each model's own window · " in str(status.render())
        await pilot.press(*"no such model")
        await wait_for(lambda: table.row_count == 0, pilot)
        # An empty table says why.
        assert str(status.render()).startswith("No model matches the filter (of ")
        picker.query_one("#models-filter", Input).value = "smollm2"
        await wait_for(lambda: table.row_count >= 1, pilot)
        await pilot.press("enter")
        await wait_for(lambda: not isinstance(app.screen, ModelPickerScreen), pilot)
        await wait_for(
            lambda: (
                app.models.model is not None
                and app.models.model.path.resolve() == demo.resolve()
                and app.chat_screen.engine is not None
            ),
            pilot,
        )


async def test_the_picker_downloads_a_model_and_switches_to_it(hub: Hub) -> None:
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await _open_picker(app, pilot)
        await pilot.press("ctrl+d")
        await pilot.press(*f"{REPO}:q8_0", "enter")
        await wait_for(
            lambda: app.models.model is not None and app.models.model.path.name == "tiny-Q8_0.gguf",
            pilot,
            timeout=30,
        )
        path = app.models.model.path
        assert path.read_bytes() == hub.files[REPO]["tiny-Q8_0.gguf"]


async def test_no_network_is_said_in_the_picker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        picker = await _open_picker(app, pilot)
        await pilot.press("ctrl+d")
        await pilot.press(*"org/repo", "enter")
        status = picker.query_one("#models-status")
        await wait_for(lambda: "Cannot reach" in str(status.render()), pilot, timeout=20)
        assert app.screen is picker  # nothing else happened


async def test_closing_the_picker_while_it_lists_models(monkeypatch: pytest.MonkeyPatch) -> None:
    # Esc right after F8: the list, made in a thread, arrives while the picker
    # is being taken down (its table already gone). The app carries on (it
    # stopped with a traceback).
    import threading

    from chat.models import table

    rows = table.settings_rows(Settings().model)
    listing = threading.Event()
    release = threading.Event()

    def held_rows(*_args: object) -> object:
        listing.set()
        release.wait(10)
        return rows

    monkeypatch.setattr(table, "settings_rows", held_rows)
    # The list arrives just as the table is unmounted.
    monkeypatch.setattr(DataTable, "on_unmount", lambda _self: release.set(), raising=False)
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await pilot.press("f8")
        await wait_for(listing.is_set, pilot)
        [lister] = [worker for worker in app.workers if worker.group == "list-models"]
        await pilot.press("escape")
        await wait_for(lambda: app.screen is screen and release.is_set(), pilot)
        await wait_for(lambda: lister.is_finished, pilot)  # the list came, or was dropped
        await pilot.pause()
        assert app.is_running and app.screen is screen


async def test_a_truncated_model_and_links_to_dot_in_the_models_folder(tmp_path: Path) -> None:
    # The models folder (KVCHAT_DATA_DIR/models) holds two links to `.`, which
    # made the picker's listing run forever, and a GGUF cut short, which was
    # offered as usable.
    from chat import paths
    from tests.models.gguf_files import llama_fields, write_gguf

    models = paths.models_dir()
    whole = write_gguf(tmp_path / "whole.gguf", llama_fields(), {"token_embd.weight": (256, 64)})
    models.mkdir(parents=True)
    (models / "cut-short.gguf").write_bytes(whole.read_bytes()[:-100])
    (models / "a").symlink_to(".")
    (models / "b").symlink_to(".")
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        picker = await _open_picker(app, pilot)
        table = picker.query_one(DataTable)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        cut = [row for row in rows if "cut-short.gguf" in str(row[0])]
        assert len(cut) == 1, [str(row[0]) for row in rows]
        assert str(cut[0][1]).startswith("The model file is cut short: ")
        picker.query_one("#models-filter", Input).value = "cut-short"
        await wait_for(lambda: table.row_count == 1, pilot)
        await pilot.press("enter")

        def said() -> bool:
            return any("cut short" in str(n.message) for n in app.notices)

        await wait_for(said, pilot)
        assert app.screen is picker  # not loaded


async def test_a_hostile_mirror_is_refused_in_the_picker(hub: Hub, tmp_path: Path) -> None:
    hub.commit = "../../../../outside"
    app = make_app(ScriptedEngine(replies=[["hi"]]))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        picker = await _open_picker(app, pilot)
        await pilot.press("ctrl+d")
        await pilot.press(*REPO, "enter")
        status = picker.query_one("#models-status")
        await wait_for(
            lambda: "Refused the commit the server named" in str(status.render()), pilot, timeout=20
        )
        assert app.screen is picker
    assert not (tmp_path / "outside").exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith((".incomplete", ".lock"))]
