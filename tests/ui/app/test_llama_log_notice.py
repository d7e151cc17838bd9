"""The real app, with the real model, when llama.cpp's log cannot be written:
the model loads and the user is told once, in a notice."""

from __future__ import annotations

from pathlib import Path

from chat import paths
from chat.models.files import ModelCandidate
from chat.runtime.model_loader import LoadState
from chat.settings.schema import ModelSettings, Settings
from chat.ui.app import ChatApp, Launch
from tests.conftest import wait_for


def _log_notices(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app.notices if n.title == "No llama.cpp log"]


async def test_a_log_that_cannot_be_written_is_told_once(demo_model: Path) -> None:
    folder = paths.log_file().parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where the state folder should be")
    settings = Settings(model=ModelSettings(n_ctx=512))
    model = ModelCandidate(demo_model, demo_model.stat().st_size, "demo")
    app = ChatApp(Launch(settings, model))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.models.state is LoadState.READY, pilot, timeout=60)
        await wait_for(lambda: _log_notices(app), pilot)
        assert _log_notices(app) == [
            f"llama.cpp's log is not being written: {folder} cannot be created: "
            f"{folder} is a file, not a folder."
        ]
