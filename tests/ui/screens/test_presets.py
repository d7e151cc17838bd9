"""Presets in the app: chosen from the palette or F9, shown in the status bar,
sent to the model, saved with the conversation and shown again when it
reopens; bad preset files are reported; the real model gets the preset's
system prompt and sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import Command, CommandList, CommandPalette

from chat import paths
from chat.conversations.store import Store
from chat.models.files import ModelCandidate
from chat.settings.presets import find_preset, load_presets
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.message_view import MessageView
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import turn_done, wait_for, write
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import MODEL, make_app, ready, run_command, send

CODER = find_preset(load_presets()[0], "coder")
assert CODER is not None and CODER.system_prompt is not None


def status(app: ChatApp) -> str:
    # All the bar holds: at 80 columns it draws the reply's figures first and
    # leaves the rest to F1 (tests/ui/screens/test_small_terminals.py).
    return app.query_one(StatusBar).full_text()


def system_shown(app: ChatApp) -> str | None:
    """The system prompt the conversation view shows, if any."""
    for view in app.query(MessageView):
        if view.message.role == "system":
            return view.message.content
    return None


def notices(app: ChatApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app.notices]


def saved_preset(conv_id: int) -> tuple[str, str, dict[str, object]]:
    with Store(paths.database_file()) as store:
        conv = store.get_conversation(conv_id)
        return conv.preset, conv.system_prompt, store.get_sampling(conv_id)


async def test_a_preset_from_the_palette_is_used_saved_and_shown_again() -> None:
    settings = Settings()
    settings.chat.system_prompt = "You are a helpful assistant."
    engine = ScriptedEngine(replies=[["sorted", "(xs)"], ["Done."]])
    app = make_app(engine, settings)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: screen.query_one(ContextMeter).state is not None, pilot)
        system_before = screen.query_one(ContextMeter).state.system  # type: ignore[union-attr]
        assert "preset" not in status(app)

        await run_command(pilot, "coder", "Use preset: coder")
        await wait_for(lambda: "preset coder" in status(app), pilot)
        assert system_shown(app) == CODER.system_prompt
        # The meter counts the new system prompt (the scripted engine: words + 4).
        expected = len(CODER.system_prompt.split()) + 4
        assert expected != system_before
        await wait_for(lambda: screen.query_one(ContextMeter).state.system == expected, pilot)  # type: ignore[union-attr]
        assert screen.settings.sampling.temperature == 0.2
        assert app.settings.sampling.temperature == 0.8  # the defaults stay

        await send(pilot, "How do I sort a list?")
        await turn_done(screen, pilot, 2)
        messages, sampling = engine.calls[-1]
        assert messages[0] == {"role": "system", "content": CODER.system_prompt}
        assert (sampling.temperature, sampling.min_p) == (0.2, 0.1)
        conv_id = screen.conversation.id
        assert conv_id is not None
        preset, system, saved_sampling = saved_preset(conv_id)
        assert (preset, system) == ("coder", CODER.system_prompt)
        assert saved_sampling["temperature"] == 0.2

        # A new conversation starts from the defaults again.
        await pilot.press("ctrl+n")
        await wait_for(lambda: "preset" not in status(app), pilot)
        assert system_shown(app) == "You are a helpful assistant."
        assert screen.settings.sampling.temperature == 0.8
        await pilot.press("ctrl+q")

    # Reopened (here: in a new app), it shows and continues with its preset.
    engine = ScriptedEngine(replies=[["Again."]])
    launch = Launch(Settings(), MODEL, resume=conv_id)
    app = ChatApp(launch, engine_factory=scripted_factory(engine))
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: screen.conversation.id == conv_id, pilot)
        await wait_for(lambda: "preset coder" in status(app), pilot)
        assert system_shown(app) == CODER.system_prompt
        await send(pilot, "And reversed?")
        await turn_done(screen, pilot, 4)
        messages, sampling = engine.calls[-1]
        assert messages[0]["content"] == CODER.system_prompt
        assert sampling.temperature == 0.2
        await pilot.press("ctrl+q")


async def test_f9_lists_only_the_presets_and_a_choice_mid_conversation_is_saved_at_once() -> None:
    engine = ScriptedEngine(replies=[["Once", " upon"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "Tell me a story.")
        await turn_done(screen, pilot, 2)
        conv_id = screen.conversation.id
        assert conv_id is not None and saved_preset(conv_id)[0] == ""

        await pilot.press("f9")
        await wait_for(lambda: isinstance(app.screen, CommandPalette), pilot)
        palette = app.screen
        listed = palette.query_one(CommandList)
        await wait_for(lambda: listed.option_count == 4, pilot)
        names = []
        for index in range(listed.option_count):
            option = listed.get_option_at_index(index)
            assert isinstance(option, Command)
            names.append(option.hit.text)
        assert names == [f"Use preset: {n}" for n in ("default", "concise", "coder", "creative")]
        await pilot.press(*"creat")
        await wait_for(lambda: listed.option_count == 1 and listed.highlighted == 0, pilot)
        await pilot.press("enter")
        await wait_for(lambda: "preset creative" in status(app), pilot)
        # Saved without waiting for the next message.
        preset, system, sampling = saved_preset(conv_id)
        assert preset == "creative" and system.startswith("You are an imaginative writer.")
        assert sampling["temperature"] == 1.1
        await wait_for(lambda: any("whole conversation again" in n for n in notices(app)), pilot)
        [told] = [n for n in notices(app) if "whole conversation again" in n]
        assert ": Preset creative: temperature 1.1 · " in told
        assert "repeat_penalty 1.1. The next reply reads" in told  # one sentence, then the next

        # "default" goes back to the configured prompt and sampling.
        await run_command(pilot, "default", "Use preset: default")
        await wait_for(lambda: "preset default" in status(app), pilot)
        assert system_shown(app) == Settings().chat.system_prompt
        assert saved_preset(conv_id)[2]["temperature"] == 0.8
        await pilot.press("ctrl+q")


async def test_user_presets_are_offered_and_bad_files_reported() -> None:
    folder = paths.user_presets_dir()
    write(
        folder,
        "tricky.toml",
        {"name": "[b]bold[/b] [@click=app.quit]", "system_prompt": "", "sampling": {"seed": 9}},
    )
    bad = write(folder, "bad.toml", {"name": "bad", "sampling": {"temprature": 0.1}})
    engine = ScriptedEngine()
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await wait_for(lambda: any("Preset file skipped" in n for n in notices(app)), pilot)
        [notice] = [n for n in notices(app) if "Preset file skipped" in n]
        assert notice == (
            f"Preset file skipped: {bad}:\n"
            "field 'sampling.temprature': is not a sampling setting; did you mean 'temperature'?"
        )
        # Markup in a name is shown as it is written, and runs nothing.
        await run_command(pilot, "bold", "Use preset: [b]bold[/b] [@click=app.quit]")
        await wait_for(lambda: "preset [b]bold[/b] [@click=app.quit]" in status(app), pilot)
        assert app.is_running
        assert system_shown(app) is None  # "" sends no system prompt
        assert screen.settings.sampling.seed == 9
        await pilot.press("ctrl+q")


async def test_no_preset_change_while_a_reply_streams() -> None:
    engine = ScriptedEngine(replies=[["a", "b", "c"]], hold_after=1)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "Hi")
        await wait_for(engine.holding.is_set, pilot)
        await screen.use_preset("coder")
        assert screen.conversation.preset == "" and "preset" not in status(app)
        await wait_for(lambda: any("Wait for the reply" in n for n in notices(app)), pilot)
        engine.release.set()
        await turn_done(screen, pilot, 2)
        await screen.use_preset("nope")
        await wait_for(lambda: any("no preset called 'nope'." in n for n in notices(app)), pilot)
        await pilot.press("ctrl+q")


# --- the real model ---------------------------------------------------------------------


@pytest.mark.model
async def test_the_real_model_gets_the_presets_prompt_and_sampling(
    demo_model: Path,
) -> None:
    """A user preset with temperature 0: the reply is the greedy one, the same
    twice, and the prompt the model read holds the preset's system prompt (the
    meter and the reply's own count agree on its size)."""
    write(
        paths.user_presets_dir(),
        "pirate.toml",
        {
            "name": "pirate",
            "system_prompt": "You are a pirate. Always answer like a pirate.",
            "sampling": {"temperature": 0.0, "max_tokens": 24},
        },
    )
    settings = Settings()
    settings.sampling.temperature = 1.5  # far from greedy: the preset must win
    candidate = ModelCandidate(demo_model, demo_model.stat().st_size, "demo")
    app = ChatApp(Launch(settings, candidate))
    async with app.run_test() as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        engine = screen.engine
        assert engine is not None
        await run_command(pilot, "pirate", "Use preset: pirate")
        await wait_for(lambda: "preset pirate" in status(app), pilot)
        expected_prompt = [
            {"role": "system", "content": "You are a pirate. Always answer like a pirate."}
        ]
        system_tokens = len(engine.tokenize_chat(expected_prompt, False))
        await wait_for(
            lambda: (
                (state := screen.query_one(ContextMeter).state) is not None
                and state.system == system_tokens
            ),
            pilot,
            timeout=30,
        )

        question = "What is your favourite colour?"
        await send(pilot, question)
        await turn_done(screen, pilot, 2, timeout=60)
        first = screen.conversation.messages[-1]
        # Regenerated from the same prompt with another random seed: at
        # temperature 0 it is the same greedy reply (at 1.5 it would differ).
        await pilot.press("ctrl+r")
        await wait_for(
            lambda: len(screen.conversation.tree) == 3 and not screen.generating,
            pilot,
            timeout=60,
        )
        second = screen.conversation.messages[-1]
        assert second is not first
        assert first.content.strip() and second.content == first.content
        assert first.stats is not None and second.stats is not None
        assert first.stats.seed != second.stats.seed
        assert first.stats.generated_tokens <= 24
        # The prompt the model read: the preset's system prompt, then the question.
        sent = engine.tokenize_chat([*expected_prompt, {"role": "user", "content": question}])
        assert first.stats.prompt_tokens == len(sent)
        await pilot.press("ctrl+q")
