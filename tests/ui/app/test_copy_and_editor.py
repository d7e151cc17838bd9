"""Copying out (F5, the palette, the ⧉ copy buttons) and writing a message in
the user's editor (Ctrl+G), with a scripted model.

Copying goes through the terminal (OSC 52: Textual's `copy_to_clipboard`, whose
text the app keeps in `app.clipboard`); a terminal known to ignore it gets the
text in a file instead, and a message saying where."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chat import paths
from chat.ui.clipboard import CodeBlock, code_blocks, terminal_without_clipboard
from chat.ui.editor import EditorError, edit_text, editor_command
from chat.ui.markdown_parser import markdown_parser
from chat.ui.widgets.copy_button import CopyButton
from chat.ui.widgets.message_view import MessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.app.quit_driver import CTRL_Q, MODEL_READY, folders_env
from tests.ui.app.typing_driver import start_typing_driver
from tests.ui.conftest import make_app, ready, run_command, send

CODE_REPLY = "Two ways:\n\n```python\nprint(1)\n```\n\nand\n\n```sh\necho 2\n```\n"


@pytest.fixture(autouse=True)
def _terminal_that_takes_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TERM_PROGRAM", "VTE_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


async def _chat(pilot, screen, text: str) -> None:  # type: ignore[no-untyped-def]
    count = len(screen.conversation.messages)
    await send(pilot, text)
    await wait_for(
        lambda: not screen.generating and len(screen.conversation.messages) == count + 2, pilot
    )


async def test_f5_copies_the_last_reply_or_the_selected_message() -> None:
    app = make_app(ScriptedEngine(replies=[["The ", "answer."]]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await _chat(pilot, screen, "A question")
        await pilot.press("f5")
        assert app.clipboard == "The answer."
        await pilot.press("alt+up", "alt+up")  # your message
        await pilot.press("f5")
        assert app.clipboard == "A question"


async def test_ctrl_c_with_nothing_selected_says_how_to_quit_in_words() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("h", "i", "ctrl+c")
        await wait_for(lambda: bool(app.notices), pilot)
        notice = app.notices[-1]
        assert (notice.title, notice.message) == (
            "Do you want to quit?",
            "Ctrl+Q quits kvchat; Esc stops a reply.",
        )
        # Selected, the text is copied instead (the box's own Ctrl+C).
        await pilot.press("f7", "ctrl+c")
        assert app.clipboard == "hi" and len(app.notices) == 1


async def test_the_palette_screenshot_goes_to_the_current_folder_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Textual saved it in ~/Downloads, and where that was missing said only
    # "Failed to save screenshot".
    monkeypatch.chdir(tmp_path)
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await run_command(pilot, "screenshot", "Screenshot")
        await wait_for(lambda: any(n.title == "Screenshot" for n in app.notices), pilot)
        [svg] = tmp_path.glob("kvchat *.svg")
        assert svg.read_text().startswith("<svg")
        assert app.notices[-1].message == f"Screenshot saved to {svg}."
        # Two in the same second: the second gets a name of its own.
        first, second = (app.deliver_screenshot(time_format="same") for _ in range(2))
        assert (first, second) == (
            str(tmp_path / "kvchat same.svg"),
            str(tmp_path / "kvchat same-2.svg"),
        )
        # A current folder removed meanwhile: the reason, no traceback.
        gone = tmp_path / "gone"
        gone.mkdir()
        monkeypatch.chdir(gone)
        gone.rmdir()
        await run_command(pilot, "screenshot", "Screenshot")
        await wait_for(lambda: app.notices[-1].severity == "error", pilot)
        assert app.notices[-1].message == (
            "The screenshot could not be saved in the current folder: no such file or directory."
        )


async def test_the_palette_offers_kvchats_help_not_textuals_keys_panel() -> None:
    # Textual's panel docked over the footer and Esc did not close it.
    from textual.command import CommandList, CommandPalette

    from chat.ui.screens.help import HelpScreen

    app = make_app(ScriptedEngine())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("ctrl+p")
        await wait_for(lambda: isinstance(app.screen, CommandPalette), pilot)
        await pilot.press(*"keys")
        suggestions = app.screen.query_one(CommandList)
        await wait_for(lambda: suggestions.option_count > 0, pilot)
        titles = [
            str(suggestions.get_option_at_index(i).prompt).split("\n")[0]
            for i in range(suggestions.option_count)
        ]
        assert "Keys" not in titles and "Keys and help" in titles
        await pilot.press("escape")
        await run_command(pilot, "keys and help", "Keys and help")
        await wait_for(lambda: isinstance(app.screen, HelpScreen), pilot)
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen), pilot)


async def test_code_blocks_copy_from_the_palette_and_their_button() -> None:
    app = make_app(ScriptedEngine(replies=[[CODE_REPLY]]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await _chat(pilot, screen, "Show me")
        await run_command(pilot, "copy code block 2", "Copy code block 2")
        assert app.clipboard == "echo 2"
        fence_buttons = [b for b in screen.query(CopyButton) if b.has_class("fence-copy")]
        assert len(fence_buttons) == 2
        await pilot.click(fence_buttons[0])
        assert app.clipboard == "print(1)"


async def test_the_message_copy_button_shows_on_hover_and_copies() -> None:
    app = make_app(ScriptedEngine(replies=[["Hello there."]]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await _chat(pilot, screen, "Hi")
        reply = next(v for v in screen.query(MessageView) if v.message.role == "assistant")
        assert not reply.query(CopyButton)  # mounted on first need
        await pilot.hover(reply, offset=(5, 0))  # over its header
        await wait_for(lambda: bool(reply.query(CopyButton)), pilot)
        button = reply.query_one(CopyButton)
        await wait_for(lambda: button.display, pilot)
        await pilot.click(button)
        assert app.clipboard == "Hello there."
        await pilot.hover(PromptBox)
        await wait_for(lambda: not button.display, pilot)


async def test_a_terminal_without_clipboard_gets_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM_PROGRAM", "Apple_Terminal")
    app = make_app(ScriptedEngine(replies=[["Saved text."]]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await _chat(pilot, screen, "Hi")
        await pilot.press("f5")
        copied = paths.state_dir() / "copied.txt"
        await wait_for(copied.is_file, pilot)
        assert copied.read_text(encoding="utf-8") == "Saved text."
        assert app.clipboard == ""  # nothing was claimed to be copied
        notices = [str(n.message) for n in app.notices]
        assert any(
            "macOS Terminal cannot take copied text" in n and str(copied) in n for n in notices
        )


def test_code_blocks_are_read_as_the_reply_shows_them() -> None:
    assert code_blocks(CODE_REPLY, markdown_parser()) == [
        CodeBlock("print(1)", "python"),
        CodeBlock("echo 2", "sh"),
    ]
    assert CodeBlock("a\nb", "").describe() == "code, 2 lines"


def test_terminals_known_to_ignore_the_clipboard_escape() -> None:
    assert terminal_without_clipboard({"TERM_PROGRAM": "Apple_Terminal"}) == "macOS Terminal"
    assert terminal_without_clipboard({"TERM": "linux"}) is not None
    assert terminal_without_clipboard({"TERM": "xterm-kitty"}) is None
    # Over SSH or in tmux, the terminal that matters is another one.
    assert terminal_without_clipboard({"VTE_VERSION": "7600", "SSH_TTY": "/dev/pts/1"}) is None


# The editor.


def _editor_script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "editor.py"
    script.write_text(f"import sys\npath = sys.argv[1]\n{body}\n", encoding="utf-8")
    return f"{sys.executable} {script}"


def test_the_editor_edits_the_text_through_a_file(tmp_path: Path) -> None:
    editor = _editor_script(
        tmp_path, "text = open(path).read()\nopen(path, 'w').write(text.upper() + '\\n')"
    )
    assert edit_text("draft", {"EDITOR": editor}) == "DRAFT"
    # $VISUAL comes first.
    assert editor_command({"VISUAL": "code --wait", "EDITOR": "nano"}) == (
        ["code", "--wait"],
        "$VISUAL",
    )


def test_editor_failures_are_sentences(tmp_path: Path) -> None:
    with pytest.raises(EditorError, match="No editor is set"):
        editor_command({"PATH": str(tmp_path)})
    with pytest.raises(EditorError, match=r"'no-such-editor' \(from \$EDITOR\) was not found"):
        edit_text("x", {"EDITOR": "no-such-editor"})
    failing = _editor_script(tmp_path, "sys.exit(3)")
    with pytest.raises(EditorError, match="exited with status 3; your text is unchanged"):
        edit_text("x", {"EDITOR": failing})


def test_ctrl_g_opens_the_editor_from_the_real_terminal(tmp_path: Path) -> None:
    """The app in a pseudo-terminal, suspended while the editor runs: the text
    written there comes back to the prompt box."""
    env = folders_env(tmp_path)
    env["EDITOR"] = _editor_script(
        tmp_path, "text = open(path).read()\nopen(path, 'w').write(text + ' and more\\n')"
    )
    typed = start_typing_driver(tmp_path, env)
    terminal = typed.terminal
    try:
        assert terminal.wait_for(MODEL_READY), terminal.output[-2000:]
        terminal.send(b"draft")
        mark = terminal.mark()
        terminal.send(b"\x07")  # Ctrl+G
        assert terminal.wait_for(b"and more", 20, since=mark), terminal.output[-2000:]
        terminal.send(CTRL_Q)
        assert terminal.wait_exit(20) == 0
    finally:
        terminal.close()
    assert typed.outcome()["box"] == "draft and more"
