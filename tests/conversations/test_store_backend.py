"""What a saved conversation was made with (issue 17): a local model file or a
model server (its kind and URL). Schema 5 adds it; exports carry it, imports
check it; a key, a password or a URL's query is never saved or exported."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from chat.conversations.conversation import BACKENDS, Conversation, Message, ReplyStats
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.conversations.transcript import ImportFormatError, parse_import, to_json, to_markdown
from tests.conversations.conftest import old_database

SECRETS = ("hunter2", "token=abc", "sk-test")


def on_server(url: str = "http://me:hunter2@gpu-box:8000/v1?token=abc") -> Conversation:
    return Conversation(
        system_prompt="Be brief.",
        title="Remote",
        model_name="Qwen2.5-7B-Instruct",
        backend="vllm",
        server_url=url,
        messages=[
            Message("user", "Hi"),
            Message(
                "assistant",
                "Hello.",
                stats=ReplyStats(12, 12, 2, 0.05, 40.0, "done", 7, 0.1),
            ),
        ],
    )


def raw_row(path: Path, conv_id: int) -> tuple[str, str]:
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT backend, server_url FROM conversations WHERE id = ?", (conv_id,)
        ).fetchone()
    return row[0], row[1]


# --- the migration -------------------------------------------------------------------


def _schema_4_database(path: Path) -> None:
    """A database as schema 4's kvchat left it: two conversations (a tree with a
    regenerated reply, and an empty one), every column filled."""
    conn = old_database(path, 4)
    conn.execute(
        "INSERT INTO conversations (id, title, created, updated, model_path, model_name, "
        "system_prompt, sampling, shown_leaf) VALUES "
        "(1, 'Soups', 1.0, 5.0, '/m/demo.gguf', 'demo', 'Be kind.', '{\"seed\": 3}', 3), "
        "(2, 'Empty', 2.0, 2.0, '', '', '', '{}', NULL)"
    )
    rows = [
        (1, 0, None, 0, "user", "Which soup?", None, None, None),
        (2, 1, 1, 1, "assistant", "Leek.", "done", 5, b"\x01\x00\x00\x00"),
        (3, 2, 1, 1, "assistant", "Miso.", "stopped", 6, None),
    ]
    for id_, position, parent, depth, role, content, finish, prompt, token_ids in rows:
        conn.execute(
            "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, "
            "content, created, finish_reason, prompt_tokens, prompt_evaluated, "
            "generated_tokens, ttft_s, decode_tps, seed, total_s, token_ids) "
            "VALUES (?, 1, ?, ?, ?, ?, ?, 1.5, ?, ?, ?, 2, 0.1, 9.0, 1, 0.3, ?)",
            (id_, position, parent, depth, role, content, finish, prompt, prompt, token_ids),
        )
    conn.close()


def _all_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
            for table in ("conversations", "messages")
        }


def test_migrating_a_schema_4_database_keeps_every_row_as_made_locally(db_path: Path) -> None:
    _schema_4_database(db_path)
    before = _all_rows(db_path)
    with Store(db_path) as opened:
        conv = opened.get_conversation(1)
        assert (conv.backend, conv.server_url) == ("local", "")
        assert (conv.model_path, conv.model_name) == ("/m/demo.gguf", "demo")
        assert [m.content for m in conv.messages] == ["Which soup?", "Miso."]
        assert len(conv.tree) == 3
        assert opened.get_sampling(1) == {"seed": 3}
        summaries = opened.list_conversations()
        assert [(s.id, s.backend, s.server_url) for s in summaries] == [
            (1, "local", ""),
            (2, "local", ""),
        ]
    after = _all_rows(db_path)
    assert SCHEMA_VERSION >= 5
    # Every old value is where it was; the two new columns follow (and those of
    # later migrations after them).
    width = len(before["conversations"][0])
    assert [row[:width] for row in after["conversations"]] == before["conversations"]
    new_columns = [row[width : width + 2] for row in after["conversations"]]
    assert new_columns == [("local", ""), ("local", "")]
    # Messages too: later migrations add columns after every old one.
    width = len(before["messages"][0])
    assert [row[:width] for row in after["messages"]] == before["messages"]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# --- saving and reading ------------------------------------------------------------


def test_a_server_conversation_is_saved_without_credentials(store: Store, db_path: Path) -> None:
    conv = on_server()
    conv_id = store.create_conversation(conv)
    assert raw_row(db_path, conv_id) == ("vllm", "http://gpu-box:8000/v1")
    loaded = store.get_conversation(conv_id)
    assert loaded.backend == "vllm" and loaded.made_on_server
    assert loaded.server_url == "http://gpu-box:8000/v1"
    assert loaded.model_name == "Qwen2.5-7B-Instruct" and loaded.model_path == ""
    [summary] = store.list_conversations()
    assert (summary.backend, summary.server_url) == ("vllm", "http://gpu-box:8000/v1")
    # Nowhere in the files, write-ahead log included.
    dump = b"".join(path.read_bytes() for path in db_path.parent.glob("conversations.db*"))
    assert not any(secret.encode() in dump for secret in SECRETS)


def test_a_local_conversation_is_recorded_as_local(store: Store) -> None:
    conv_id = store.create_conversation(Conversation(model_path="/m/x.gguf", model_name="x"))
    loaded = store.get_conversation(conv_id)
    assert (loaded.backend, loaded.server_url, loaded.made_on_server) == ("local", "", False)


def test_settings_update_changes_the_backend_only_when_given(store: Store, db_path: Path) -> None:
    conv_id = store.create_conversation(on_server())
    store.update_conversation_settings(conv_id, "Be brief.", {}, "", "Qwen2.5-7B-Instruct")
    assert raw_row(db_path, conv_id) == ("vllm", "http://gpu-box:8000/v1")
    store.update_conversation_settings(
        conv_id, "Be brief.", {}, "", "llama", backend="ollama", server_url="http://u:p@h:11434"
    )
    assert raw_row(db_path, conv_id) == ("ollama", "http://h:11434")
    # Continued with the local model.
    store.update_conversation_settings(
        conv_id, "Be brief.", {}, "/m/x.gguf", "x", backend="local", server_url=""
    )
    loaded = store.get_conversation(conv_id)
    assert (loaded.backend, loaded.server_url, loaded.model_path) == ("local", "", "/m/x.gguf")


def test_an_unknown_backend_is_a_programming_error(store: Store) -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        store.create_conversation(Conversation(backend="tgi"))
    assert store.count_conversations() == 0
    assert "tgi" not in BACKENDS


def test_a_fork_keeps_the_server(store: Store) -> None:
    conv = on_server("http://h:8080")
    fork = conv.fork_at(conv.messages[0])
    assert (fork.backend, fork.server_url) == ("vllm", "http://h:8080")


# --- export and import -------------------------------------------------------------


def test_json_export_names_the_server_and_imports_back() -> None:
    text = to_json(on_server(), {"temperature": 0.2})
    meta = json.loads(text)["kvchat"]
    assert meta["backend"] == "vllm"
    assert meta["server_url"] == "http://gpu-box:8000/v1"
    assert not any(secret in text for secret in SECRETS)
    conv, sampling = parse_import(text)
    assert (conv.backend, conv.server_url) == ("vllm", "http://gpu-box:8000/v1")
    assert sampling == {"temperature": 0.2}


def test_markdown_export_says_which_server() -> None:
    text = to_markdown(on_server())
    assert "- **Model:** Qwen2.5-7B-Instruct" in text
    assert "- **Server:** vllm at http://gpu-box:8000/v1" in text
    assert not any(secret in text for secret in SECRETS)
    assert "**Server:**" not in to_markdown(Conversation(model_name="x"))


def test_files_from_before_servers_import_as_local() -> None:
    data = json.loads(to_json(Conversation(messages=[Message("user", "Hi")]), {}))
    del data["kvchat"]["backend"], data["kvchat"]["server_url"]
    conv, _ = parse_import(json.dumps(data))
    assert (conv.backend, conv.server_url) == ("local", "")
    plain, _ = parse_import('[{"role": "user", "content": "Hi"}]')
    assert (plain.backend, plain.server_url) == ("local", "")


def test_an_imported_url_loses_its_password(store: Store, db_path: Path) -> None:
    data = json.loads(to_json(on_server("http://h:1"), {}))
    data["kvchat"]["server_url"] = "https://me:hunter2@h.example/v1?token=abc"
    conv, sampling = parse_import(json.dumps(data))
    assert conv.server_url == "https://h.example/v1"
    conv_id = store.import_conversation(conv, sampling)
    assert raw_row(db_path, conv_id) == ("vllm", "https://h.example/v1")


@pytest.mark.parametrize(
    ("backend", "url", "said"),
    [
        ("tgi", "http://h:1", '"kvchat.backend" is not one of local, auto, llama-server'),
        (7, "http://h:1", '"kvchat.backend" is not one of'),
        ("local", "http://h:1", '"kvchat.server_url" is set for a local model'),
        ("vllm", "", '"kvchat.server_url" is not an http:// or https:// URL'),
        ("vllm", "file:///etc/passwd", '"kvchat.server_url" is not an http:// or https:// URL'),
        ("vllm", "http://h:1/\x1b]0;x\x07", '"kvchat.server_url" is not an http://'),
        ("vllm", ["http://h:1"], '"kvchat.server_url" is not a string'),
    ],
)
def test_import_checks_the_backend(backend: object, url: object, said: str) -> None:
    data = json.loads(to_json(on_server("http://h:1"), {}))
    data["kvchat"]["backend"] = backend
    data["kvchat"]["server_url"] = url
    with pytest.raises(ImportFormatError) as caught:
        parse_import(json.dumps(data))
    assert said in str(caught.value)


def test_a_servers_model_path_never_keeps_a_password(store: Store, db_path: Path) -> None:
    """A served model's `model_path` is its server's URL made a path; kvchat
    before issue 27 wrote it with the URL's user name and password."""
    conv = on_server()
    conv.model_path = "http:/me:hunter2@gpu-box:8000/v1"  # as Path(url) spelled it
    conv_id = store.create_conversation(conv)
    with sqlite3.connect(db_path) as conn:
        (stored,) = conn.execute("SELECT model_path FROM conversations").fetchone()
    assert stored == "http:/gpu-box:8000/v1"
    store.update_conversation_settings(conv_id, "", {}, "http:/me:hunter2@gpu-box:8000/v1", "m")
    assert not any(b"hunter2" in f.read_bytes() for f in db_path.parent.iterdir())
    # A database written before: its exports leave the password out.
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE conversations SET model_path = 'http:/me:hunter2@gpu-box:8000/v1'")
    old = store.get_conversation(conv_id)
    for text in (to_json(old, {}), to_markdown(old)):
        assert "hunter2" not in text and "gpu-box:8000" in text
