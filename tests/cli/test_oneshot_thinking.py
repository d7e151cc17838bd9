"""`chat -p` with a reasoning model (issue 29 point 7): stdout has the answer
alone; the thinking goes to stderr, dim, when that is a terminal, nowhere
when it is not or with --hide-thinking; --json carries both with their token
counts.

The replies are the demo model's own tokens, made to think by a grammar
(tests/engine/reasoning_models.py) with Qwen3's and DeepSeek-R1's templates.
Most tests play them back through a scripted engine put where one-shot mode
gets its engine (quick, and each shape of reply on demand); the last one runs
the real engine end to end, the grammar given where `--json-schema` gives
one-shot mode its grammar."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import llama_cpp
import pytest

from chat.cli import main as cli
from chat.engine import remote
from chat.engine.reasoning.markers import Reasoning, recognise, special_token_test
from tests.engine.reasoning_models import deepseek_r1_model, qwen3_model
from tests.engine.test_reasoning import GRAMMARS, real_reply, template
from tests.fakes import ScriptedEngine

pytestmark = pytest.mark.model

DIM, NORMAL = "\x1b[2m", "\x1b[22m"


@dataclass(frozen=True)
class Played:
    """A real reply: the text of each sampled token, how the model thinks,
    and the thinking and answer the engine's splitter made of it."""

    pieces: list[str]
    reasoning: Reasoning
    thinking: str
    answer: str
    thinking_tokens: int


@pytest.fixture(scope="module")
def played(
    demo_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Played]]:
    folder = tmp_path_factory.mktemp("thinking-oneshot")
    paths = {"qwen3": qwen3_model(demo_model, folder), "r1": deepseek_r1_model(demo_model, folder)}
    replies: dict[str, Played] = {}
    for name, path in paths.items():
        llm = llama_cpp.Llama(str(path), n_ctx=512, verbose=False)
        try:
            source = llm.metadata["tokenizer.chat_template"]
            reasoning = recognise(source, template(source), special_token_test(llm.tokenize))
            assert reasoning is not None
            reply = real_reply(llm, GRAMMARS[name], 300)
        finally:
            llm.close()
        splitter = reply.splitter
        replies[name] = Played(
            reply.pieces, reasoning, splitter.thinking, splitter.answer, splitter.thinking_tokens
        )
    yield replies


class Terminal(io.StringIO):
    """Captures what is written, as a terminal would receive it."""

    def isatty(self) -> bool:
        return True


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_with(
    monkeypatch: pytest.MonkeyPatch,
    pieces: list[str],
    reasoning: Reasoning | None,
    *args: str,
    err_is_terminal: bool = True,
    engine: ScriptedEngine | None = None,
) -> Run:
    """`chat -p` (with `args`) on an engine that replies `pieces` and thinks as
    `reasoning` says; stderr a terminal or a pipe."""
    engine = engine if engine is not None else ScriptedEngine(replies=[pieces])
    engine.info = replace(engine.info, reasoning=reasoning)
    monkeypatch.setattr(remote, "connect", lambda config: engine)
    out = io.StringIO()
    err = Terminal() if err_is_terminal else io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    code = cli.main(["-p", "Why is the sky blue?", "--server", "http://127.0.0.1:9", *args])
    return Run(code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("name", GRAMMARS)
def test_stdout_has_the_answer_and_a_terminal_stderr_the_thinking(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    reply = played[name]
    assert reply.reasoning.prompt_opens_block == (name == "r1")
    result = run_with(monkeypatch, reply.pieces, reply.reasoning)
    assert result.code == 0, result.err
    assert result.out == reply.answer + "\n"
    assert "think>" not in result.out + result.err
    # The thinking, dim, then normal text and a blank line before the answer.
    end = "\n" if reply.thinking.endswith("\n") else "\n\n"
    assert result.err == DIM + reply.thinking + NORMAL + end
    assert reply.thinking.strip() and reply.answer[0].isupper()


@pytest.mark.parametrize("name", GRAMMARS)
def test_no_thinking_on_a_pipe_or_with_hide_thinking(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    reply = played[name]
    piped = run_with(monkeypatch, reply.pieces, reply.reasoning, err_is_terminal=False)
    hidden = run_with(monkeypatch, reply.pieces, reply.reasoning, "--hide-thinking")
    for result in (piped, hidden):
        assert (result.code, result.out, result.err) == (0, reply.answer + "\n", "")


@pytest.mark.parametrize("name", GRAMMARS)
def test_json_has_the_answer_the_thinking_and_their_token_counts(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    reply = played[name]
    # Nothing streams with --json, on a terminal's stderr either; --hide-thinking
    # hides it from people, not from programs.
    for flags in (["--json"], ["--json", "--hide-thinking"]):
        result = run_with(monkeypatch, reply.pieces, reply.reasoning, *flags)
        assert (result.code, result.err) == (0, ""), result.err
        data = json.loads(result.out)
        assert (data["reply"], data["thinking"]) == (reply.answer, reply.thinking)
        stats = data["stats"]
        assert stats["thinking_tokens"] == reply.thinking_tokens > 0
        assert stats["answer_tokens"] == len(reply.pieces) - reply.thinking_tokens > 0
        assert stats["generated_tokens"] == len(reply.pieces)
        assert stats["first_answer_s"] is not None and stats["first_answer_s"] >= 0


def test_a_reply_that_ends_mid_thought_says_there_is_no_answer(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = played["qwen3"]
    thought = reply.pieces[:12]  # cut before the thinking ends
    result = run_with(monkeypatch, thought, reply.reasoning)
    assert result.code == 0 and result.out == ""
    shown, _, warning = result.err.partition(NORMAL)
    assert shown.startswith(DIM) and len(shown) > len(DIM)
    assert warning.strip() == (
        "chat: warning: the reply ended while the model was still thinking "
        "(the model ended it): there is no answer."
    )
    data = json.loads(run_with(monkeypatch, thought, reply.reasoning, "--json").out)
    assert data["reply"] == "" and data["thinking"] == shown.removeprefix(DIM)
    assert data["stats"]["thinking_tokens"] == 12 and data["stats"]["answer_tokens"] == 0
    assert data["stats"]["first_answer_s"] is None


def test_a_model_that_does_not_think_prints_as_before(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `ModelInfo.reasoning` the reply is text like any other, markers and all."""
    reply = played["qwen3"]
    result = run_with(monkeypatch, reply.pieces, None)
    assert result.out == "".join(reply.pieces) + "\n" and result.err == ""
    data = json.loads(run_with(monkeypatch, reply.pieces, None, "--json").out)
    assert data["reply"] == "".join(reply.pieces) and data["thinking"] == ""
    assert data["stats"]["thinking_tokens"] == 0 and data["stats"]["first_answer_s"] is None


def test_thinking_on_the_terminal_carries_no_escape_sequence(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch
) -> None:
    reasoning = played["qwen3"].reasoning
    pieces = ["<think>\n", "plan \x1b]52;c;aGk=\x07 ", "\x1b[2J\x9b31m ok", "\n</think>\n\n", "Hi."]
    result = run_with(monkeypatch, pieces, reasoning)
    assert result.out == "Hi.\n"
    assert result.err == DIM + "plan   ok\n" + NORMAL + "\n"  # C1 CSI (0x9b) too


def test_ctrl_c_mid_thought_leaves_the_terminal_text_normal(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = played["qwen3"]
    tokens: list[str] = []

    def interrupt(text: str) -> None:
        tokens.append(text)
        if len(tokens) == 10:  # inside the thought (12 tokens or more, see above)
            raise KeyboardInterrupt

    engine = ScriptedEngine(replies=[reply.pieces], on_token=interrupt)
    result = run_with(monkeypatch, reply.pieces, reply.reasoning, engine=engine)
    assert result.code == 130 and result.out == ""
    assert result.err.startswith(DIM) and result.err.endswith(NORMAL + "\n\n")


class LoadedEngine(ScriptedEngine):
    """A scripted engine as `load_engine` returns a local model's."""

    plain_template_reason = None

    def choose_threads(self, settings: object, spare_core: bool) -> None:
        pass


def test_a_local_model_splits_its_reply_too(
    played: dict[str, Played], monkeypatch: pytest.MonkeyPatch, demo_model: Path
) -> None:
    import chat.engine.llama as llama

    reply = played["r1"]
    engine = LoadedEngine(replies=[reply.pieces])
    engine.info = replace(engine.info, reasoning=reply.reasoning)
    monkeypatch.setattr(llama, "load_engine", lambda path, settings, log: engine)
    for flags, thinking_shown in (((), True), (("--hide-thinking",), False)):
        out, err = io.StringIO(), Terminal()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        assert cli.main(["-p", "Why?", "--model", str(demo_model), *flags]) == 0
        assert out.getvalue() == reply.answer + "\n"
        assert (reply.thinking in err.getvalue()) == thinking_shown


@pytest.mark.parametrize("name", ["qwen3", "r1"])
def test_the_real_engine_prints_the_answer_and_counts_the_thinking(
    name: str, demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One-shot mode end to end on the real engine: the reasoning copy of the
    demo model loaded as `chat -p` loads it, made to think by the grammar
    (which one-shot takes from `--json-schema` for a user: the same hook).
    stdout has the answer alone, the terminal's stderr the thinking, and
    --json both, with the thinking's token count."""
    from chat.cli.oneshot import run_oneshot
    from chat.models.files import ModelCandidate
    from chat.settings.schema import Settings
    from tests.engine.reasoning_models import OPENED_GRAMMAR, THINKING_GRAMMAR

    make = {"qwen3": qwen3_model, "r1": deepseek_r1_model}[name]
    grammar = {"qwen3": THINKING_GRAMMAR, "r1": OPENED_GRAMMAR}[name]
    path = make(demo_model, tmp_path)
    model = ModelCandidate(path, path.stat().st_size, "--model")
    settings = Settings()
    settings.sampling.seed, settings.sampling.max_tokens = 7, 300
    err = Terminal()
    monkeypatch.setattr("sys.stderr", err)
    out = io.StringIO()
    assert run_oneshot("Why?", settings, model, as_json=False, out=out, grammar=grammar) == 0
    answer = out.getvalue().rstrip("\n")
    assert answer and answer[0].isupper() and "think>" not in answer
    assert "think>" not in err.getvalue() and len(err.getvalue().strip()) > len(answer) // 4
    as_json = io.StringIO()
    assert run_oneshot("Why?", settings, model, as_json=True, out=as_json, grammar=grammar) == 0
    data = json.loads(as_json.getvalue())
    assert data["reply"] == answer  # the same seed, the same reply
    assert data["thinking"] and "think>" not in data["thinking"]
    assert data["stats"]["thinking_tokens"] > 0
