"""The saved-conversation flags of the CLI, run as real subprocesses (with the
config and data folders in temporary directories, see conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chat import paths
from chat.cli import main as cli
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.ui.app import Launch

REPO_ROOT = Path(__file__).resolve().parents[2]


def chat(*args: str) -> subprocess.CompletedProcess[str]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "chat", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath),
        stdin=subprocess.DEVNULL,
    )


def save(title: str, *texts: str) -> int:
    conv = Conversation(system_prompt="Be brief.", title=title, model_name="demo")
    for i, text in enumerate(texts):
        stats = ReplyStats(9, 9, 2, 0.1, 40.0, "done", seed=1) if i % 2 else None
        conv.append(Message("user" if i % 2 == 0 else "assistant", text, stats=stats))
    with Store(paths.database_file()) as store:
        return store.create_conversation(conv, {"temperature": 0.3})


def save_branches() -> int:
    """A question answered twice (the second reply regenerated), the first reply
    followed up; the branch shown is the regenerated reply's."""
    conv = Conversation(title="Soup", model_name="demo")
    question = Message("user", "Soup?")
    conv.append(question)
    first = Message("assistant", "Leek soup.", token_ids=[11, 12])
    conv.append(first)
    conv.append(Message("user", "Colder?"))
    conv.append(Message("assistant", "Gazpacho."))
    conv.add_sibling(first, Message("assistant", "Miso soup.", token_ids=[13]))
    with Store(paths.database_file()) as store:
        return store.create_conversation(conv, {"temperature": 0.3})


def conversation_count() -> int:
    with Store(paths.database_file()) as store:
        return store.count_conversations()


def test_list_prints_id_title_updated_and_messages() -> None:
    result = chat("--list")
    assert (result.returncode, result.stdout) == (0, "No saved conversations yet.\n")
    first = save("Bread", "How?", "Knead.")
    second = save("Tea \x1b]0;evil\x07time", "Green?")
    result = chat("--list")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["id", "updated", "messages", "resume", "title"]
    assert rows[0].split()[0] == str(second)  # newest first
    assert rows[0].endswith("Tea time") and "\x1b" not in result.stdout
    assert rows[1].split()[0] == str(first) and rows[1].split()[3] == "2"
    assert rows[1].endswith("Bread")
    # Each column starts where its header does (ids under 10 were a column left).
    for name in ("updated", "title"):
        assert rows[1][header.index(name) - 1] == " " != rows[1][header.index(name)]
    assert rows[1][header.index("messages") + len("messages") - 1] == "2"


def test_export_markdown_and_json_to_stdout() -> None:
    conv_id = save("Bread", "How do I bake bread?", "Knead **well**.")
    markdown = chat("--export", str(conv_id))
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith("# Bread\n")
    assert "## User\n\nHow do I bake bread?" in markdown.stdout
    assert "Knead **well**." in markdown.stdout
    as_json = chat("--export", str(conv_id), "--format", "json")
    data = json.loads(as_json.stdout)
    assert data["messages"][0] == {"role": "system", "content": "Be brief."}
    assert data["kvchat"]["sampling"] == {"temperature": 0.3}


# What an imported conversation may carry: retitle the terminal (OSC 0), write the
# clipboard (OSC 52), clear the screen (CSI 2J), the same as an 8-bit C1 CSI.
HOSTILE = "\x1b]0;pwned\x07Hi\x1b]52;c;Zm9v\x07 there\x1b[2J\x9b2J\x7f"


def test_an_export_piped_to_a_terminal_cannot_control_it() -> None:
    conv_id = save("Title\x1b]0;x\x07", HOSTILE, "Fine.")
    markdown = chat("--export", str(conv_id))  # stdout is a pipe, as in `| cat`
    assert markdown.returncode == 0, markdown.stderr
    controls = [c for c in markdown.stdout if ord(c) < 32 and c not in "\n\t"]
    assert controls == [] and not any(0x7F <= ord(c) <= 0x9F for c in markdown.stdout)
    # Shown, not hidden: the reader sees that the text had escape sequences.
    assert "# Title␛]0;x␇\n" in markdown.stdout
    assert "␛]0;pwned␇Hi␛]52;c;Zm9v␇ there␛[2J<U+009B>2J␡" in markdown.stdout
    # JSON keeps the exact text, every control escaped as JSON does.
    as_json = chat("--export", str(conv_id), "--format", "json")
    assert not any((ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in as_json.stdout)
    assert json.loads(as_json.stdout)["messages"][1]["content"] == HOSTILE


def test_list_counts_the_messages_of_the_branch_shown() -> None:
    conv_id = save_branches()
    rows = chat("--list").stdout.splitlines()[1:]
    assert rows[0].split()[0] == str(conv_id) and rows[0].split()[3] == "2"


def test_export_markdown_of_the_branch_shown_or_of_every_branch() -> None:
    conv_id = save_branches()
    shown = chat("--export", str(conv_id))
    assert shown.returncode == 0, shown.stderr
    assert "Miso soup." in shown.stdout and "Leek" not in shown.stdout
    assert "- **Branches:** 2 (the one last shown below)" in shown.stdout
    every = chat("--export", str(conv_id), "--all-branches")
    assert every.returncode == 0, every.stderr
    assert "## Branch 1 of 2\n\n### User\n\nSoup?\n\n### Assistant\n\nLeek soup." in every.stdout
    assert "Gazpacho." in every.stdout
    assert "## Branch 2 of 2 (shown)\n\n### User\n\nSoup?\n\n### Assistant\n\nMiso soup." in (
        every.stdout
    )


def test_all_branches_goes_with_export() -> None:
    result = chat("--all-branches")
    assert result.returncode == 2
    assert result.stderr == (
        "chat: --all-branches goes with --export (chat --export ID --all-branches).\n"
    )


def test_a_tree_round_trips_through_export_and_import(tmp_path: Path) -> None:
    conv_id = save_branches()
    exported = tmp_path / "soup.json"
    exported.write_text(chat("--export", str(conv_id), "--format", "json").stdout)
    result = chat("--import", str(exported))
    assert result.returncode == 0, result.stderr
    new_id = int(result.stdout.strip())
    again = chat("--export", str(new_id), "--format", "json").stdout
    assert again == exported.read_text()
    with Store(paths.database_file()) as store:
        copy = store.get_conversation(new_id)
    assert [m.content for m in copy.messages] == ["Soup?", "Miso soup."]
    assert [(m.content, m.token_ids) for m in copy.tree.siblings(copy.messages[1])] == [
        ("Leek soup.", [11, 12]),
        ("Miso soup.", [13]),
    ]


def test_import_takes_openai_style_messages(tmp_path: Path) -> None:
    linear = tmp_path / "openai.json"
    linear.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"},
                ]
            }
        )
    )
    result = chat("--import", str(linear))
    assert result.returncode == 0, result.stderr
    with Store(paths.database_file()) as store:
        copy = store.get_conversation(int(result.stdout))
    assert copy.system_prompt == "Be kind."
    assert [(m.role, m.content) for m in copy.messages] == [("user", "Hi"), ("assistant", "Hello!")]
    assert copy.messages[1].parent is copy.messages[0]


def test_import_prints_the_new_id_and_round_trips(tmp_path: Path) -> None:
    conv_id = save("Bread", "How?", "Knead.")
    exported = tmp_path / "bread.json"
    exported.write_text(chat("--export", str(conv_id), "--format", "json").stdout)
    result = chat("--import", str(exported))
    assert result.returncode == 0, result.stderr
    new_id = int(result.stdout.strip())
    assert new_id != conv_id
    with Store(paths.database_file()) as store:
        original, copy = store.get_conversation(conv_id), store.get_conversation(new_id)
    assert copy.title == original.title and copy.system_prompt == "Be brief."
    assert [(m.role, m.content, m.stats) for m in copy.messages] == [
        (m.role, m.content, m.stats) for m in original.messages
    ]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "is not valid JSON"),
        ('{"messages": [{"role": "user", "content": "ok"}, {"role": "robot"}]}', "message 2"),
    ],
)
def test_bad_import_says_why_and_imports_nothing(tmp_path: Path, content: str, says: str) -> None:
    save("Existing", "hello")
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = chat("--import", str(bad))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"chat: Cannot import {bad}: ") and says in result.stderr
    assert result.stderr.count("\n") == 1
    assert conversation_count() == 1


def test_unknown_ids_are_usage_errors() -> None:
    save("Bread", "How?")
    # An id past SQLite's integers too: it printed an OverflowError's traceback.
    for number in ("999", "99999999999999999999999"):
        for args in (["--resume", number], ["--export", number]):
            result = chat(*args)
            assert result.returncode == 2
            assert result.stderr == (
                f"chat: There is no saved conversation {number}; "
                "`chat --list` shows the saved ones.\n"
            )
    result = chat("--resume", "abc")
    assert result.returncode == 2 and "invalid int value" in result.stderr


def test_cli_never_imports_textual_for_conversation_commands() -> None:
    code = (
        "import sys; from chat.cli.main import main; main(['--list']); "
        "print(any(m.startswith('textual') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert result.stdout.strip().endswith("False")


class FakeApp:
    """Stands in for ChatApp: records how the CLI would start it."""

    started: list[int | None] = []
    problems: list[str] = []
    return_code: int | None = 0

    def __init__(self, launch: Launch, **kwargs: object) -> None:
        FakeApp.started.append(launch.resume)
        FakeApp.problems = list(launch.startup_problems)

    def run(self) -> None:
        pass


@pytest.fixture
def fake_app(monkeypatch: pytest.MonkeyPatch) -> type[FakeApp]:
    import chat.ui.app

    FakeApp.started = []
    monkeypatch.setattr(chat.ui.app, "ChatApp", FakeApp)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # the app draws on a terminal
    return FakeApp


def test_the_app_is_not_started_without_a_terminal_to_draw_on(
    fake_app: type[FakeApp], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `chat --continue | cat` drew the app's screens into the pipe.
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert cli.main(["--continue"]) == 2
    assert fake_app.started == []
    assert "needs a terminal to draw on" in capsys.readouterr().err


def test_chat_exits_with_the_apps_status(
    fake_app: type[FakeApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1 after an error nothing handled (chat.ui.crash_report), else 0.
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert cli.main([]) == 0
    monkeypatch.setattr(fake_app, "return_code", 1)
    assert cli.main([]) == 1


def test_continue_and_resume_open_the_right_conversation(
    fake_app: type[FakeApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert cli.main(["--continue"]) == 0
    assert fake_app.started == [None]
    assert fake_app.problems == ["There are no saved conversations yet: this is a new one."]
    older = save("Older", "one")
    newer = save("Newer", "two")
    assert cli.main(["--continue"]) == 0
    assert cli.main(["--resume", str(older)]) == 0
    assert fake_app.started == [None, newer, older]
    # stdin is not read when reopening (it would mean a one-shot prompt otherwise).
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert cli.main(["--continue"]) == 0
    assert fake_app.started[-1] == newer
