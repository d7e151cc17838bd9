"""`chat -p` and piped stdin, run as a real subprocess with the demo model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def chat(
    *args: str, stdin: str | None = None, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "chat", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_prompt_flag_streams_plain_text(demo_model: Path) -> None:
    result = chat("-p", "Say hi.", "--temperature", "0", "--max-tokens", "20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "\x1b" not in result.stdout
    assert result.stderr == ""  # llama.cpp's log goes to the log file


def test_stdin_prompt_and_json(demo_model: Path) -> None:
    result = chat(
        "--json", "--temperature", "0", "--max-tokens", "12", "--seed", "5", stdin="What is 2+2?"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["reply"].strip()
    stats = data["stats"]
    for key in (
        "prompt_tokens",
        "prompt_evaluated",
        "prompt_reused",
        "generated_tokens",
        "ttft_s",
        "decode_tps",
        "finish_reason",
        "seed",
    ):
        assert key in stats
    assert stats["seed"] == 5
    assert 0 < stats["generated_tokens"] <= 12


def test_greedy_one_shot_is_repeatable(demo_model: Path) -> None:
    args = ("-p", "Name three fruits.", "--temperature", "0", "--max-tokens", "16")
    first, second = chat(*args), chat(*args)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.strip()  # a reply, the same one twice
    assert second.stdout == first.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--model", "/nonexistent/x.gguf", "-p", "hi"),
            "Model file not found: /nonexistent/x.gguf",
        ),
        (("--temperature", "9", "-p", "hi"), "out of range"),
        (("-p", "   "), "The prompt is empty"),
    ],
)
def test_errors_are_one_sentence_and_exit_2(args: tuple[str, ...], message: str) -> None:
    result = chat(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"not a model", "Not a GGUF model file: {path}"),
        (b"", "The model file is empty: {path} (an interrupted download?)."),
        (b"GGUF\x03\x00", "The model file is cut short: {path} holds 6 bytes"),
    ],
)
def test_a_file_that_is_no_model_says_what_is_wrong(
    tmp_path: Path, content: bytes, said: str
) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(content)
    result = chat("--model", str(fake), "-p", "hi")
    assert result.returncode == 2
    assert said.format(path=fake) in result.stderr
    # Only a file that is something else is told llama.cpp needs GGUF.
    assert ("needs .gguf" in result.stderr) == (content == b"not a model")


def test_list_models_shows_the_demo_model(demo_model: Path) -> None:
    result = chat("--list-models")
    assert result.returncode == 0
    assert str(demo_model) in result.stdout
    line = next(line for line in result.stdout.splitlines() if "SmolLM2" in line)
    # Read from the file's header: parameters, quantization, size, trained
    # window, template; then the memory it needs, and where it was found.
    for text in ("135M", "Q4_1", "93.8 MiB", "8,192", "chatml", "MiB at 8,192 ctx", "demo model"):
        assert text in line, (text, line)
    assert "Free memory now" in result.stdout


def test_list_models_json(demo_model: Path) -> None:
    import json

    result = chat("--list-models", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = [r for r in json.loads(result.stdout) if r["path"] == str(demo_model)]
    assert (row["parameters"], row["quantization"], row["context_length"]) == (
        134_515_008,
        "Q4_1",
        8192,
    )
    assert row["memory"]["n_ctx"] == 8192 and row["memory"]["fits"] is True


def test_list_models_finds_the_models_folder(tmp_path: Path, demo_model: Path) -> None:
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / "mine.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    result = chat("--list-models", env_extra={"KVCHAT_DATA_DIR": str(data)})
    assert result.returncode == 0, result.stderr
    assert "mine.gguf" in result.stdout and "models folder" in result.stdout
    # Not a real model: listed, with why it cannot be used, not a traceback.
    assert "cannot be used: The model file" in result.stdout


def test_a_closed_pipe_is_not_a_traceback(demo_model: Path) -> None:
    """`chat -p ... | head -c 5`: the reader leaves early; chat stops quietly."""
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chat",
            "-p",
            "Write a long poem about the sea.",
            "--max-tokens",
            "200",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(5)
    proc.stdout.close()  # like `head` exiting
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in stderr
    assert proc.returncode in (0, 141)
