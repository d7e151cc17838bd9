"""The llama.cpp engine with the real demo model (SmolLM2-135M, ChatML)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from chat.engine import llama as llama_engine
from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Finished, TokenEvent
from chat.errors import ModelError, PromptTooLongError
from chat.settings.schema import ModelSettings, SamplingSettings

GREEDY = SamplingSettings(temperature=0.0, max_tokens=24)
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def run(
    engine: LlamaEngine,
    messages: list[dict[str, str]],
    sampling: SamplingSettings,
    cancel_after: int | None = None,
) -> tuple[list[TokenEvent], Finished]:
    cancel = threading.Event()
    tokens: list[TokenEvent] = []
    finished = None
    for event in engine.stream_reply(messages, sampling, cancel):
        if isinstance(event, TokenEvent):
            tokens.append(event)
            if cancel_after is not None and len(tokens) >= cancel_after:
                cancel.set()
        else:
            finished = event
    assert finished is not None
    return tokens, finished


def test_streams_tokens_then_stats(engine: LlamaEngine) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Say hello."}]
    tokens, finished = run(engine, messages, GREEDY)
    assert len(tokens) >= 2
    assert "".join(t.text for t in tokens) == finished.text
    stats = finished.stats
    assert stats.generated_tokens == len([t for t in tokens if t.token_id >= 0])
    assert stats.prompt_tokens == len(engine.tokenize_chat(messages))
    assert 0 < stats.prompt_evaluated <= stats.prompt_tokens
    assert stats.ttft_s > 0
    assert stats.decode_tps > 0
    assert stats.finish_reason in ("done", "max_tokens")


def test_model_info(engine: LlamaEngine, demo_model: Path) -> None:
    info = engine.info
    assert info.path == demo_model
    assert info.name == "SmolLM2-135M-Instruct.Q4_1"
    assert info.n_ctx == 2048
    assert info.n_ctx_train == 8192
    assert info.n_layers == 30
    assert "CPU only" in info.device_text() or info.device_text().startswith("GPU:")


def test_chat_template_tokens(engine: LlamaEngine) -> None:
    ids = engine.tokenize_chat([{"role": "user", "content": "hi"}])
    # ChatML, with the default system prompt SmolLM2's template adds when none is given.
    text = engine.chat_prompt.spell(ids).decode()
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_cancel_keeps_partial_reply_and_kv_consistent(engine: LlamaEngine) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Count from one to fifty in words."}]
    sampling = replace(GREEDY, max_tokens=200)
    _, finished = run(engine, messages, sampling, cancel_after=5)
    assert finished.stats.finish_reason == "stopped"
    assert finished.stats.generated_tokens == 5
    # The KV cache holds the prompt plus every generated token but the last,
    # which was sampled and never evaluated.
    assert engine.cached_tokens == finished.stats.prompt_tokens + 5 - 1
    # The engine still works and reuses the cache after a stop.
    follow = [
        *messages,
        {"role": "assistant", "content": finished.text},
        {"role": "user", "content": "Go on."},
    ]
    _, after = run(engine, follow, GREEDY)
    assert after.stats.prompt_reused > 0


def test_kv_cache_reused_on_turn_two(engine: LlamaEngine) -> None:
    engine.reset()
    turn1 = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    _, first = run(engine, turn1, GREEDY)
    assert first.stats.prompt_evaluated == first.stats.prompt_tokens  # cold cache
    turn2 = [
        *turn1,
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And of Italy?"},
    ]
    _, second = run(engine, turn2, GREEDY)
    assert second.stats.prompt_tokens > first.stats.prompt_tokens
    # Only the new part is evaluated: far fewer than are sent.
    assert second.stats.prompt_evaluated < second.stats.prompt_tokens / 2
    assert second.stats.prompt_reused == second.stats.prompt_tokens - second.stats.prompt_evaluated


def test_reset_forgets_the_cache(engine: LlamaEngine) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    run(engine, messages, GREEDY)
    engine.reset()
    _, again = run(engine, messages, GREEDY)
    assert again.stats.prompt_evaluated == again.stats.prompt_tokens


def test_prompt_longer_than_window_is_refused(engine: LlamaEngine) -> None:
    huge = "word " * 3000
    with pytest.raises(PromptTooLongError, match="context window holds 2,048"):
        run(engine, [{"role": "user", "content": huge}], GREEDY)
    # and the engine is usable afterwards
    _, finished = run(engine, [{"role": "user", "content": "Hi"}], GREEDY)
    assert finished.stats.generated_tokens > 0


def test_reply_reaching_the_window_end_stops_cleanly(demo_model: Path, tmp_path: Path) -> None:
    small = load_engine(demo_model, ModelSettings(n_ctx=256), tmp_path / "llama.log")
    try:
        assert small.info.n_ctx == 256
        prompt = [{"role": "user", "content": "Write a very long story about a dragon."}]
        _, finished = run(
            small, prompt, SamplingSettings(temperature=0.0, max_tokens=4096, repeat_penalty=1.3)
        )
        stats = finished.stats
        if stats.finish_reason == "context_full":
            assert stats.prompt_tokens + stats.generated_tokens == 256
        else:  # the model ended on its own before filling the window
            assert stats.finish_reason == "done"
            assert stats.prompt_tokens + stats.generated_tokens < 256
    finally:
        small.close()


def test_max_tokens(engine: LlamaEngine) -> None:
    messages = [{"role": "user", "content": "Write a long poem about the sea."}]
    _, finished = run(engine, messages, replace(GREEDY, max_tokens=7))
    assert finished.stats.generated_tokens == 7
    assert finished.stats.finish_reason == "max_tokens"


def test_utf8_split_across_tokens_is_whole(engine: LlamaEngine) -> None:
    # Emoji and CJK are several tokens each in this vocabulary: their bytes
    # arrive split, and the reply must still contain whole characters.
    messages = [{"role": "user", "content": "Repeat exactly: 😀🎉 漢字 café"}]
    tokens, finished = run(engine, messages, replace(GREEDY, max_tokens=40))
    assert "\ufffd" not in finished.text
    assert "".join(t.text for t in tokens) == finished.text
    emoji_ids = engine.chat_prompt.tokenize_text("😀".encode(), add_bos=False)
    assert len(emoji_ids) > 1  # the premise: one character, several tokens


def test_greedy_is_deterministic_and_seeds_matter(engine: LlamaEngine) -> None:
    messages = [{"role": "user", "content": "Tell me a short fact about cats."}]
    engine.reset()
    _, a = run(engine, messages, replace(GREEDY, max_tokens=20))
    engine.reset()
    _, b = run(engine, messages, replace(GREEDY, max_tokens=20))
    assert a.text == b.text
    hot = SamplingSettings(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, max_tokens=20, seed=7)
    engine.reset()
    _, c = run(engine, messages, hot)
    engine.reset()
    _, d = run(engine, messages, hot)
    assert c.text == d.text and c.stats.seed == 7
    texts = set()
    for _ in range(3):
        _, e = run(engine, messages, replace(hot, seed=None))
        texts.add(e.text)
    assert len(texts) > 1


def test_stop_sequences(engine: LlamaEngine) -> None:
    messages = [{"role": "user", "content": "Write two sentences about the moon."}]
    _, full = run(engine, messages, replace(GREEDY, max_tokens=40))
    words = full.text.split()
    assert len(words) > 6
    stop = " ".join(words[4:6])  # a stop sequence that spans several tokens
    tokens, finished = run(engine, messages, replace(GREEDY, max_tokens=40, stop=[stop]))
    assert finished.text == full.text[: full.text.index(stop)]
    assert "".join(t.text for t in tokens) == finished.text  # held-back text never leaked
    assert finished.stats.finish_reason == "done"


def test_missing_and_non_gguf_files(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        load_engine(tmp_path / "nope.gguf", ModelSettings(), tmp_path / "log")
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelError, match="Not a GGUF"):
        load_engine(text, ModelSettings(), tmp_path / "log")


def test_truncated_gguf_fails_with_a_sentence(demo_model: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(demo_model.read_bytes()[: 1024 * 1024])
    with pytest.raises(ModelError, match=r"Could not load the model .*broken\.gguf"):
        load_engine(broken, ModelSettings(), tmp_path / "log")


@pytest.mark.parametrize(
    ("chosen", "gpu_build", "gpu_layers", "expected"),
    [
        ("auto", False, -1, "q8_0"),  # a CPU-only build
        ("auto", True, 0, "q8_0"),  # a GPU build told to stay on the CPU
        ("auto", True, -1, "f16"),  # on the GPU: llama.cpp's own default
        ("f16", False, -1, "f16"),
        ("q8_0", True, -1, "q8_0"),
    ],
)
def test_key_cache_type(
    monkeypatch: pytest.MonkeyPatch, chosen: str, gpu_build: bool, gpu_layers: int, expected: str
) -> None:
    monkeypatch.setattr(llama_engine, "gpu_offload_supported", lambda: gpu_build)
    settings = ModelSettings(cache_type_k=chosen, n_gpu_layers=gpu_layers)
    assert llama_engine.key_cache_type(settings) == expected


def test_key_cache_type_reaches_llama_cpp(
    engine: LlamaEngine, demo_model: Path, tmp_path: Path
) -> None:
    # This CPU-only build: "auto" gave the shared engine q8_0 keys, and it
    # reuses its KV cache like any other (test_kv_cache_reused_on_turn_two).
    assert engine.key_cache_type == "q8_0"
    f16 = load_engine(demo_model, ModelSettings(n_ctx=512, cache_type_k="f16"), tmp_path / "l.log")
    try:
        assert f16.key_cache_type == "f16"
        _, finished = run(f16, [{"role": "user", "content": "Say hello."}], GREEDY)
        assert finished.stats.generated_tokens > 0
    finally:
        f16.close()


def test_same_prompt_and_seed_give_the_same_reply_whatever_the_cache_holds(
    engine: LlamaEngine,
) -> None:
    # Regenerating finds the prompt cached; editing the last message resumes
    # inside the last prompt. Neither may change the reply of a fixed seed
    # (a token evaluated alone gets other logits than in a batch).
    seeded = SamplingSettings(temperature=1.0, seed=1234, max_tokens=60)
    engine.reset()
    hello = [SYSTEM, {"role": "user", "content": "Hello!"}]
    earlier = [*hello, {"role": "assistant", "content": run(engine, hello, GREEDY)[1].text}]
    poem = [*earlier, {"role": "user", "content": "Write a poem about the sea."}]
    other = [*earlier, {"role": "user", "content": "Write a poem about the mountains."}]
    first = run(engine, poem, seeded)[1]
    assert first.stats.prompt_evaluated < first.stats.prompt_tokens  # turn 1 came from the cache
    regenerated = run(engine, poem, seeded)[1]
    assert regenerated.text == first.text
    # A repeatable prompt is never evaluated as one token alone: two go again.
    assert regenerated.stats.prompt_evaluated == 2
    run(engine, other, seeded)
    assert run(engine, poem, seeded)[1].text == first.text


def test_prefill_starts_the_reply_at_once_and_changes_no_reply(engine: LlamaEngine) -> None:
    seeded = SamplingSettings(temperature=1.0, seed=1234, max_tokens=40)
    engine.reset()
    hello = [SYSTEM, {"role": "user", "content": "Hello!"}]
    earlier = [*hello, {"role": "assistant", "content": run(engine, hello, GREEDY)[1].text}]
    engine.rebatch_reply()  # as the app does after a repeatable reply
    before = engine.save_state()
    assert before is not None

    def from_earlier() -> None:  # the KV cache as the reply to "Hello!" left it
        engine.restore_state(before)

    def ask(text: str) -> list[dict[str, str]]:
        return [*earlier, {"role": "user", "content": text}]

    plain = run(engine, ask("Write a poem about the sea."), seeded)[1]
    assert plain.stats.prompt_evaluated > 0

    # Paused over the finished text, then sent: nothing left to evaluate.
    from_earlier()
    assert engine.prefill(ask("Write a poem about the sea."))
    prefilled = run(engine, ask("Write a poem about the sea."), seeded)[1]
    assert prefilled.stats.prompt_evaluated == 0
    assert prefilled.stats.prompt_reused == prefilled.stats.prompt_tokens
    assert prefilled.text == plain.text

    # Paused halfway through the text: the rest is evaluated (in another
    # batch, which changes nothing: only a batch of one token would).
    from_earlier()
    assert engine.prefill(ask("Write a poem about"))
    typed_on = run(engine, ask("Write a poem about the sea."), seeded)[1]
    assert 0 < typed_on.stats.prompt_evaluated < plain.stats.prompt_evaluated
    assert typed_on.text == plain.text

    # A draft prefilled after a reply does not change what regenerating it gives.
    assert engine.prefill(ask("Write a poem about the mountains."))
    assert run(engine, ask("Write a poem about the sea."), seeded)[1].text == plain.text


def test_a_reply_sent_during_a_prefill_waits_for_it(engine: LlamaEngine) -> None:
    engine.reset()
    long_text = "Here is a long message about lighthouses and storms. " * 30
    messages = [SYSTEM, {"role": "user", "content": long_text}]
    prefill = threading.Thread(target=engine.prefill, args=(messages,))
    prefill.start()
    while not engine._prefilling and prefill.is_alive():
        pass
    finished = run(engine, messages, GREEDY)[1]  # no EngineBusyError
    prefill.join()
    assert finished.stats.generated_tokens > 0
    assert finished.stats.prompt_evaluated == 0  # the prefill did it all


def test_prefill_declines_what_it_cannot_do(engine: LlamaEngine) -> None:
    engine.reset()
    too_long = [SYSTEM, {"role": "user", "content": "word " * 600}]  # more than one batch
    assert not engine.prefill(too_long)
    assert not engine.prefill([SYSTEM, {"role": "user", "content": "word " * 9000}])
    assert engine.cached_tokens == 0


def test_prefill_of_an_opened_conversation_evaluates_what_the_reply_would(
    engine: LlamaEngine,
) -> None:
    # A conversation reopened from the database: nothing of it is in the cache.
    seeded = SamplingSettings(temperature=1.0, seed=99, max_tokens=30)
    story = "The keeper climbed the stairs of the lighthouse every night. " * 12
    history = [SYSTEM]
    for turn in range(4):
        history += [
            {"role": "user", "content": f"Part {turn}, please."},
            {"role": "assistant", "content": story},
        ]
    ask = [*history, {"role": "user", "content": "How does it end?"}]
    engine.reset()
    cold = run(engine, ask, seeded)[1]

    engine.reset()
    assert engine.prefill(history, add_generation_prompt=False)
    ahead = engine.cached_tokens
    assert ahead > 0 and ahead % engine.batch_size == 0  # whole batches only
    continued = run(engine, ask, seeded)[1]
    assert continued.stats.prompt_evaluated == cold.stats.prompt_evaluated - ahead
    assert continued.text == cold.text  # the same batches, so the same logits


def test_a_cut_model_file_fails_with_llama_cpps_own_reason(
    demo_model: Path, tmp_path: Path
) -> None:
    # An interrupted download: a valid GGUF header, the tensors cut off.
    cut = tmp_path / "cut.gguf"
    with demo_model.open("rb") as whole:
        cut.write_bytes(whole.read(2_000_000))
    log = tmp_path / "llama.log"
    with pytest.raises(ModelError) as refused:
        load_engine(cut, ModelSettings(n_ctx=512), log)
    said = str(refused.value)
    assert said.startswith(f"Could not load the model {cut}: tensor 'token_embd.weight' data")
    assert "model is corrupted or incomplete" in said and str(log) in said
    assert "Failed to load model from file" not in said  # llama-cpp-python's vaguer words
