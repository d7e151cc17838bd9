"""Attaching text files in the app: `@path` with Tab completion, the strip
above the prompt box, the meter, sending, saving, reopening and exporting;
the file picker; and, on the real model, that the file's text reaches it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat.conversations.attachments import Attachment
from chat.conversations.store import Store
from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.attach_file import AttachFileScreen
from chat.ui.widgets.attachment_strip import AttachmentChip, AttachmentStrip
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.message_view import UserMessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, run_command

NOTES = "milk eggs bread butter"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder kvchat is started in, with a few files."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    (work / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    monkeypatch.chdir(work)
    return work


def chips(app: ChatApp) -> list[str]:
    return [str(chip.render()) for chip in app.query(AttachmentChip)]


def chip_on_screen(app: ChatApp) -> bool:
    """A chip has been laid out where a click can reach it (it is queryable
    as soon as it is mounted, before its strip is shown and laid out)."""
    return any(chip.region.width > 0 for chip in app.query(AttachmentChip))


def problems(app: ChatApp) -> str:
    return " ".join(str(w.render()) for w in app.query(".attachment-problem"))


async def test_at_path_completes_shows_counts_and_is_sent_saved_and_exported(
    folder: Path,
) -> None:
    engine = ScriptedEngine(replies=[["Milk", " and", " eggs."]])
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        box = app.query_one(PromptBox)
        box.focus()
        await pilot.press(*"summarise @no")
        await wait_for(lambda: "notes.txt" in str(box.border_title), pilot)
        await pilot.press("tab")
        assert box.text == "summarise @notes.txt "
        # The strip shows the file and its tokens; the meter counts it.
        attachment = Attachment("notes.txt", NOTES)
        tokens = screen.session.budget.attachment_tokens(attachment)  # type: ignore[union-attr]
        await wait_for(lambda: chips(app) == [f"📎 notes.txt · {tokens} tokens ✕"], pilot)
        meter = app.query_one(ContextMeter)
        with_file = screen.session.plan(
            f"summarise @notes.txt \n\nFile: notes.txt\n```\n{NOTES}\n```"
        )
        await wait_for(lambda: meter.state is not None and meter.state.new == with_file.new, pilot)  # type: ignore[union-attr]
        assert with_file.new > screen.session.plan("summarise @notes.txt ").new  # type: ignore[union-attr]

        await pilot.press("enter")
        await turn_done(screen, pilot, 2)
        sent = engine.calls[0][0][-1]["content"]
        assert sent == f"summarise @notes.txt \n\nFile: notes.txt\n```\n{NOTES}\n```"
        strip = app.query_one(AttachmentStrip)
        await wait_for(lambda: not strip.display, pilot)  # the next message has none
        view = app.query(UserMessageView).last()
        assert "📎 notes.txt" in str(view.query_one(".message-attachments").render())
        assert NOTES not in str(view.query_one(".message-body").render())

        # Saved with the message; reopened, the prompt is the same, byte for byte.
        conv_id = screen.conversation.id
        assert conv_id is not None
        store = screen.saver.store
        assert store is not None
        reloaded = store.get_conversation(conv_id)
        assert reloaded.messages[0].attachments == (attachment,)
        assert reloaded.messages[0].as_chat_dict()["content"] == sent
        assert await screen.open_conversation(conv_id)
        await pilot.pause()
        assert "📎 notes.txt" in str(
            app.query(UserMessageView).last().query_one(".message-attachments").render()
        )

        screen.action_export()
        exported = next(folder.glob("*.md")).read_text()
        assert f"File: notes.txt\n```\n{NOTES}\n```" in exported


async def test_binary_file_is_refused_with_a_message_and_nothing_is_sent(folder: Path) -> None:
    engine = ScriptedEngine()
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        box = app.query_one(PromptBox)
        box.focus()
        box.insert("what is in @photo.png, ask @alice or mail me@example.com")
        await wait_for(lambda: "binary" in problems(app), pilot)
        await pilot.press("enter")
        await pilot.pause()
        assert engine.calls == [] and screen.conversation.messages == []
        assert any("photo.png is not a text file" in n.message for n in app.notices)
        assert box.text.startswith("what is in @photo.png")  # nothing lost


async def test_picker_attaches_a_file_and_a_click_removes_it(folder: Path) -> None:
    engine = ScriptedEngine()
    app = make_app(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        await run_command(pilot, "Attach a file", "Attach a file…")
        await wait_for(lambda: isinstance(app.screen, AttachFileScreen), pilot)
        await pilot.press(*"notes.txt", "enter")
        await wait_for(lambda: chip_on_screen(app), pilot)
        assert chips(app)[0].startswith("📎 notes.txt · ")
        await pilot.click(AttachmentChip)
        await wait_for(lambda: chips(app) == [], pilot)
        assert screen.draft.picked == []
        # A file named with @: a click takes the @ off, its name stays as text.
        box = app.query_one(PromptBox)
        box.insert("see @notes.txt")
        await wait_for(lambda: chip_on_screen(app), pilot)
        await pilot.click(AttachmentChip)
        await wait_for(lambda: box.text == "see notes.txt", pilot)


@pytest.mark.model
async def test_real_model_receives_the_file_and_counts_it_as_the_meter_does(
    demo_model: Path, folder: Path
) -> None:
    (folder / "code.txt").write_text("The secret word is PERIWINKLE.\n")
    settings = Settings()
    settings.model.n_ctx = 2048
    settings.sampling.max_tokens = 24
    settings.sampling.temperature = 0.0
    app = ChatApp(Launch(settings, ModelCandidate(demo_model, demo_model.stat().st_size, "demo")))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.chat_screen.engine is not None, pilot, timeout=120)
        screen = app.chat_screen
        engine = screen.engine
        assert engine is not None
        box = app.query_one(PromptBox)
        box.focus()
        box.insert("What is the secret word in @code.txt? Answer with the word only.")
        meter = app.query_one(ContextMeter)
        await wait_for(lambda: chips(app) != [], pilot, timeout=30)
        draft = screen.meter.draft_text()
        assert "PERIWINKLE" in draft
        # What the meter shows (system prompt + the new message) is what the engine counts.
        system = screen.conversation.system_prompt
        prompt = [{"role": "system", "content": system}] if system else []
        expected = len(engine.tokenize_chat([*prompt, {"role": "user", "content": draft}], True))
        await wait_for(
            lambda: meter.state is not None and meter.state.system + meter.state.new == expected,
            pilot,
        )
        await pilot.press("enter")
        await turn_done(screen, pilot, 2, timeout=120)
        reply = screen.conversation.messages[-1]
        assert reply.stats is not None
        assert reply.stats.prompt_tokens == expected
        assert "periwinkle" in reply.content.lower()
        with Store(screen.saver.store.path) as store:  # type: ignore[union-attr]
            saved = store.get_conversation(screen.conversation.id)  # type: ignore[arg-type]
        assert saved.messages[0].as_chat_dict()["content"] == draft
        assert json.dumps(saved.messages[0].attachments[0].text) == json.dumps(
            "The secret word is PERIWINKLE.\n"
        )


def toasts(app: ChatApp) -> list[str]:
    """The notices on screen, as their text."""
    from textual.widgets._toast import Toast

    return [str(toast.render()) for toast in app.screen.query(Toast)]


async def test_a_refused_sends_notice_goes_once_a_message_is_sent(folder: Path) -> None:
    """A message refused for a file it names says why for 12 seconds; once the
    user takes the name out and the message is sent, the notice goes at once
    (the app's list of notices keeps it)."""
    engine = ScriptedEngine()
    app = make_app(engine)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        screen = await ready(app, pilot)
        box = app.query_one(PromptBox)
        box.focus()
        box.insert("what is in @photo.png")
        await pilot.press("enter")
        await wait_for(
            lambda: any("photo.png is not a text file" in toast for toast in toasts(app)), pilot
        )
        assert engine.calls == []
        box.clear()
        box.insert("what is in the notes, then")
        await pilot.press("enter")
        await turn_done(screen, pilot, 2)
        await wait_for(
            lambda: not any("photo.png is not a text file" in toast for toast in toasts(app)),
            pilot,
            2,
        )
        assert any("photo.png is not a text file" in n.message for n in app.notices)
