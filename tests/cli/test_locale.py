"""A locale whose encoding is not UTF-8 (issue 27): `LC_ALL=C` (ASCII) and,
where `localedef` can build one, a Latin-1 locale. The real `chat` command runs
in subprocesses with Python's UTF-8 mode off (PYTHONUTF8=0, PYTHONIOENCODING
unset), over a database and a models folder holding text and a file name
that such a terminal cannot show. Each command prints what it can, with the
rest escaped, and never a traceback.

Before: `--list`, `--export` and `-p` ended with UnicodeEncodeError."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.remote.fake_servers import FakeServer, openai_routes

QUESTION = "Où est le café ☕ ?"
"""The first message: the conversation's title too."""
REPLY = ["Voilà", " ☕", " 東京"]


def latin1_locale(folder: Path) -> dict[str, str] | None:
    """The environment of a Latin-1 locale built into `folder`, or None where
    this machine has no `localedef` or no locale sources."""
    localedef = shutil.which("localedef")
    if localedef is None:
        return None
    done = subprocess.run(
        [localedef, "-i", "en_US", "-f", "ISO-8859-1", str(folder / "en_US.ISO-8859-1")],
        capture_output=True,
    )
    if not (folder / "en_US.ISO-8859-1").is_dir():
        print(f"no Latin-1 locale: {done.stderr.decode(errors='replace')}")
        return None
    return {"LOCPATH": str(folder), "LC_ALL": "en_US.ISO-8859-1"}


@pytest.fixture(scope="module")
def locales(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    found = [{"LC_ALL": "C"}]
    latin1 = latin1_locale(tmp_path_factory.mktemp("locales"))
    if latin1 is not None:
        found.append(latin1)
    else:
        print("testing LC_ALL=C only: this machine cannot build a Latin-1 locale")
    return found


def environment(home: Path, locale: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVCHAT_", "LC_", "LANG", "PYTHONIOENCODING", "PYTHONUTF8"))
    }
    env.update(
        KVCHAT_CONFIG_DIR=str(home / "config"),
        KVCHAT_DATA_DIR=str(home / "data"),
        KVCHAT_STATE_DIR=str(home / "state"),
        KVCHAT_CACHE_DIR=str(home / "cache"),
        PYTHONUTF8="0",
        **locale,
    )
    return env


def chat(env: dict[str, str], *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "chat", *args], env=env, capture_output=True, timeout=120
    )


def assert_clean(done: subprocess.CompletedProcess[bytes], code: int = 0) -> str:
    """The output as text; no traceback on either stream, the exit status `code`."""
    out, err = done.stdout.decode("latin-1"), done.stderr.decode("latin-1")
    assert "Traceback" not in out + err and "Error:" not in err, out + err
    assert done.returncode == code, out + err
    return out


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A database holding one conversation with non-ASCII text, and a models
    folder holding a file whose name is not UTF-8."""
    source = tmp_path / "import.json"
    source.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": "À côté — 東京駅の近く."},
                ],
            }
        ),
        encoding="utf-8",
    )
    models = tmp_path / "data" / "models"  # kvchat's own models folder
    models.mkdir(parents=True)
    (models / os.fsdecode(b"mod\xe8le-\xff.gguf")).write_bytes(b"GGUF broken")
    done = chat(environment(tmp_path, {"LC_ALL": "C.UTF-8"}), "--import", str(source))
    assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer(openai_routes(words=REPLY))
    fake.start()
    yield fake
    fake.stop()


def test_listing_and_exporting_print_what_the_locale_can_show(
    home: Path, locales: list[dict[str, str]]
) -> None:
    for locale in locales:
        env = environment(home, locale)
        listed = assert_clean(chat(env, "--list"))
        assert "est le caf" in listed
        markdown = assert_clean(chat(env, "--export", "1"))
        assert "le caf" in markdown
        exported = assert_clean(chat(env, "--export", "1", "--format", "json"))
        # JSON escapes what ASCII cannot hold: it still reads back whole.
        assert json.loads(exported)["messages"][0]["content"] == QUESTION
        models = assert_clean(chat(env, "--list-models"))
        assert "mod" in models  # the name shown, its odd bytes escaped
        assert_clean(chat(env, "--list-themes"))
        if locale["LC_ALL"] == "C":
            assert "\\u2615" in listed  # the cup, which ASCII cannot show
            assert "\\udcff" in models  # the byte that is not UTF-8, as a surrogate


def test_a_one_shot_reply_prints_under_a_locale_that_cannot_show_it(
    home: Path, locales: list[dict[str, str]], server: FakeServer
) -> None:
    for locale in locales:
        env = environment(home, locale)
        # As the terminal sends it: UTF-8 under LC_ALL=C (the usual mismatch),
        # Latin-1 under a Latin-1 locale.
        prompt = "Où ?".encode("utf-8" if locale["LC_ALL"] == "C" else "latin-1")
        done = chat(env, "-p", prompt, "--server", server.url, "--server-kind", "openai")
        printed = assert_clean(done)
        assert "Voil" in printed
        sent = server.last("/v1/chat/completions").body["messages"][-1]["content"]
        assert sent == "Où ?"
        done = chat(env, "-p", prompt, "--json", "--server", server.url, "--server-kind", "openai")
        # JSON stays JSON: what the locale cannot show is escaped as JSON escapes it.
        assert json.loads(assert_clean(done))["reply"] == "".join(REPLY)
