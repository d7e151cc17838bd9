"""The whole machine's speed, and how much of it reaches the user.

Raw llama-cpp-python at every candidate thread count (decode: a token at a
time; prompt: one 512-token batch), llama.cpp's own `llama-bench` at the same
counts, and the real app in a pseudo-terminal at the thread counts kvchat
chose: its decode rate as a share of the fastest raw rate (target >= 0.9, docs/performance.md),
its prompt rate as a share of the fastest raw batch rate (>= 0.95), and the
CPU its UI spends per 100 tokens streamed (at the first reply here; at the
40th and for code, chat.bench.ui_cost)."""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import llama_cpp

from chat.bench.decode import raw_decode_rate
from chat.bench.llama_bench import NativeRates, bench_binary, native_rates
from chat.bench.remote import LlamaServer, _post, server_binary
from chat.bench.rows import Options, Row
from chat.bench.startup import installed_python_env
from chat.bench.terminal import LONG_PROMPT, TerminalReply, stream_in_terminal
from chat.bench.textual_floor import floor_rows
from chat.bench.ui_cost import UI_CPU_TARGET, ui_cost_rows
from chat.bench.workload import SAMPLING, STORY, busy_core
from chat.engine.llama import LlamaEngine, key_cache_type
from chat.engine.threads import ThreadCounts, candidates, usable_cores
from chat.settings.schema import ModelSettings


def raw_decode_rate_at(engine: LlamaEngine, threads: int, tokens: int) -> float:
    """The decode measure's raw loop (chat.bench.decode), at `threads` threads."""
    llama_cpp.llama_set_n_threads(engine.llama.ctx, threads, threads)
    return raw_decode_rate(engine, tokens)


def raw_prompt_rate(engine: LlamaEngine, threads: int, prompt: list[int]) -> float:
    """`prompt` evaluated as llama-cpp-python does (batches of n_batch)."""
    llm = engine.llama
    llama_cpp.llama_set_n_threads(llm.ctx, threads, threads)
    engine.reset()
    started = time.perf_counter()
    llm.eval(prompt)
    # On a GPU llama_decode returns before the batch is computed: wait for it.
    llama_cpp.llama_synchronize(llm.ctx)
    return len(prompt) / (time.perf_counter() - started)


def machine_rows(engine: LlamaEngine, chosen: ThreadCounts, options: Options) -> list[Row]:
    """The machine's rates at each count, and the app's beside them. The
    engine's own counts are put back at the end."""
    own = engine.info.threads or chosen
    counts = candidates(usable_cores())
    rounds = 1 if options.quick else 3
    # The prompt the app is timed on in the pseudo-terminal.
    long_prompt = engine.tokenize_chat([{"role": "user", "content": LONG_PROMPT}])
    decode: dict[int, list[float]] = {n: [] for n in counts}
    prompt: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(rounds):  # the counts take turns: the machine's speed drifts
        for n in counts:
            decode[n].append(raw_decode_rate_at(engine, n, options.tokens))
            prompt[n].append(raw_prompt_rate(engine, n, long_prompt))
    engine.use_threads(own)
    engine.reset()
    best_decode = {n: max(rates) for n, rates in decode.items()}
    best_prompt = {n: max(rates) for n, rates in prompt.items()}
    top_decode = max(best_decode, key=best_decode.__getitem__)
    top_prompt = max(best_prompt, key=best_prompt.__getitem__)
    rows = [
        Row(f"decode: raw llama-cpp-python, {n} thread{'s' * (n > 1)}", rate, "tok/s")
        for n, rate in best_decode.items()
    ]
    rows += [
        Row(f"prompt: raw llama-cpp-python, {n} thread{'s' * (n > 1)}", rate, "tok/s")
        for n, rate in best_prompt.items()
    ]
    rows.append(
        Row(
            "threads kvchat chose (decode / prompt)",
            chosen.decode,
            "",
            note=f"{chosen.decode_text()}, prompt {chosen.batch}, {chosen.how}; "
            f"fastest raw: decode {top_decode}, prompt {top_prompt}",
        )
    )
    native = _native(options, counts)
    if native is not None:
        rows += [
            Row(f"llama-bench tg128, {n} thread{'s' * (n > 1)}", rate, "tok/s")
            for n, rate in native.decode_tps.items()
        ]
        rows += [
            Row(f"llama-bench pp512, {n} thread{'s' * (n > 1)}", rate, "tok/s")
            for n, rate in native.prompt_tps.items()
        ]
    env = installed_python_env(Path(tempfile.mkdtemp(prefix="kvchat-bench-")))
    # The app chooses its own threads, as for a user (measured at its first
    # start): `runs`, each after the raw loop at the fastest count. Issue 33's
    # rows against the raw loop and llama-server's own loop are at one thread:
    # `at_one`, each after the loop and the server at one thread. Side by
    # side, the machine's drift shared.
    one = ThreadCounts(1, chosen.batch, "set")
    runs: list[TerminalReply] = []
    at_one: list[TerminalReply] = []
    raw_fastest: list[float] = []
    raw_beside: list[float] = []
    server_beside: list[float] = []
    with _llama_server(engine, one, options) as server_url:
        for _ in range(1 if options.quick else 3):
            raw_fastest.append(raw_decode_rate_at(engine, top_decode, options.tokens))
            runs.append(stream_in_terminal(options.model, env, options.tokens))
            raw_beside.append(raw_decode_rate_at(engine, 1, options.tokens))
            if server_url is not None:
                server_beside.append(server_decode_rate(engine, server_url, options.tokens))
            if chosen.decode == 1 and chosen.busy is None:
                at_one.append(runs[-1])  # the same run
            else:
                at_one.append(stream_in_terminal(options.model, env, options.tokens, threads=one))
    engine.use_threads(own)
    least_ui = min(runs, key=lambda each: each.ui_cpu_per_100_tokens)
    ui_cpu = least_ui.ui_cpu_per_100_tokens
    frames_per_s = min(each.frames_per_s for each in runs)
    app_prompt = max(each.prompt_tps for each in runs)
    app_decode = statistics.median(each.decode_tps for each in runs)
    decode_share = app_decode / statistics.median(raw_fastest)
    prompt_share = app_prompt / best_prompt[top_prompt]
    rows += [
        Row(
            "decode: the app in a pseudo-terminal, kvchat's threads",
            app_decode,
            "tok/s",
            ">= 90% of the fastest raw",
            decode_share >= 0.9,
            f"{decode_share:.1%} of raw at {top_decode} thread{'s' * (top_decode > 1)} "
            f"(medians of {len(runs)}, taking turns); kvchat decodes with "
            f"{chosen.decode_text()}",
        ),
        _beside_raw_row(at_one, raw_beside, 1),
        _beside_server_row(at_one, server_beside, one),
        *busy_core_rows(engine, chosen, options, env, long_prompt),
        Row(
            "prompt: the app in a pseudo-terminal, kvchat's threads",
            app_prompt,
            "tok/s",
            ">= 95% of the fastest raw",
            prompt_share >= 0.95,
            f"{prompt_share:.1%} of raw at {top_prompt} thread{'s' * (top_prompt > 1)}",
        ),
        Row(
            "UI CPU while a reply streams",
            ui_cpu,
            "CPU-s / 100 tok",
            f"<= {UI_CPU_TARGET}",
            ui_cpu <= UI_CPU_TARGET,
            "the UI thread and Textual's output and input threads; "
            f"{least_ui.kib_written_per_100_tokens:.3g} KiB written to the terminal per 100 tok; "
            f"kvchat's own threads meanwhile {least_ui.kvchat_threads_cpu_s:.3f} CPU-s "
            "(not counted)",
        ),
        *floor_rows(options, env, least_ui),
        _decode_thread_row(max(at_one, key=lambda each: each.decode_tps)),
        *ui_cost_rows(options, env, ui_cpu),
        Row(
            "frames drawn while a reply streams",
            frames_per_s,
            "frames/s",
            ">= 10 (reads as live)",
            frames_per_s >= 10,
            "from sending to the reply's end; the terminal says it synchronizes output",
        ),
    ]
    if native is not None:
        native_decode = max(native.decode_tps.values())
        native_prompt = max(native.prompt_tps.values())
        rows += [
            Row(
                "decode: the app / llama-bench tg128 (fastest)",
                app_decode / native_decode,
                "x",
                ">= 0.8 (stretch)",
                app_decode / native_decode >= 0.8,
            ),
            Row("prompt: the app / llama-bench pp512 (fastest)", app_prompt / native_prompt, "x"),
        ]
    return rows


STALLED_TOKENS = 40
"""Tokens of the raw loop timed with every core's thread while a core is
taken (a few a second: enough to show the stall)."""


def busy_core_rows(
    engine: LlamaEngine,
    chosen: ThreadCounts,
    options: Options,
    env: dict[str, str],
    long_prompt: list[int],
) -> list[Row]:
    """The app while another program keeps a core busy, against the raw loop
    at the busy machine's count and at kvchat's count, with the same program
    running: the full team stalls, the app does not stay with it
    (chat.engine.decode_threads). Its first reply, the pasted prompt, meets
    the program at once: its prompt against the raw batch at each count.
    Only where kvchat names a busy count."""
    if chosen.busy is None:
        return []
    own = engine.info.threads or chosen
    with busy_core():
        stalled = raw_decode_rate_at(engine, chosen.decode, 16 if options.quick else STALLED_TOKENS)
        raw = raw_decode_rate_at(engine, chosen.busy, options.tokens)
        raw_prompt = raw_prompt_rate(engine, chosen.busy, long_prompt)
        stalled_prompt = raw_prompt_rate(engine, chosen.decode, long_prompt)
        app = stream_in_terminal(options.model, env, options.tokens)
    engine.use_threads(own)
    engine.reset()
    share = app.decode_tps / raw
    prompt_share = app.prompt_tps / raw_prompt
    return [
        Row(
            f"decode, a core taken by another program: the app / the raw loop at {chosen.busy}",
            share,
            "x",
            ">= 0.8",
            share >= 0.8,
            f"app {app.decode_tps:.1f} tok/s ({chosen.decode_text()}), raw loop "
            f"{raw:.1f} tok/s at {chosen.busy} thread{'s' * (chosen.busy > 1)} and "
            f"{stalled:.1f} at {chosen.decode}; a busy program running meanwhile",
        ),
        Row(
            "prompt, a core taken by another program: the app's first reply / the raw batch "
            f"at {chosen.busy}",
            prompt_share,
            "x",
            ">= 0.8",
            prompt_share >= 0.8,
            f"app {app.prompt_tps:.0f} tok/s to its first token, {len(long_prompt)} tokens "
            f"pasted; raw batch {raw_prompt:.0f} tok/s at {chosen.busy} "
            f"thread{'s' * (chosen.busy > 1)} and {stalled_prompt:.0f} at {chosen.decode}; "
            "the reply starts a thread fewer when the kernel says another program runs",
        ),
    ]


def _beside_raw_row(runs: list[TerminalReply], raw: list[float], threads: int) -> Row:
    """The app's decode against the raw loop at the same threads, each run of
    the app just after one of the loop (medians)."""
    app_rate = statistics.median(each.decode_tps for each in runs)
    raw_rate = statistics.median(raw)
    share = app_rate / raw_rate
    return Row(
        "decode: the app in a pseudo-terminal / the raw loop, same threads",
        share,
        "x",
        ">= 0.98",
        share >= 0.98,
        f"app {app_rate:.1f} tok/s, raw loop {raw_rate:.1f} tok/s at {threads} "
        f"thread{'s' * (threads > 1)}; medians of {len(runs)}, taking turns",
    )


@contextlib.contextmanager
def _llama_server(
    engine: LlamaEngine, chosen: ThreadCounts, options: Options
) -> Iterator[str | None]:
    """llama-server on the benchmark's model, as the app runs it: the app's
    threads, window and key cache type, one slot; its URL (None, said on
    stderr, without a llama-server binary)."""
    binary = server_binary()
    if binary is None:
        print("llama-server's own loop left out: no llama-server", file=sys.stderr)
        yield None
        return
    with tempfile.TemporaryDirectory() as folder:
        serving = LlamaServer(
            binary,
            options.model,
            Path(folder),
            threads=chosen.decode,
            context=engine.info.n_ctx,
            extra=(
                *("--threads-batch", str(chosen.batch), "--flash-attn", "off"),
                *("--cache-type-k", key_cache_type(ModelSettings())),
            ),
        )
        with serving as url:
            yield url


def server_decode_rate(engine: LlamaEngine, url: str, tokens: int) -> float:
    """llama-server's own decode rate (what it reports, timed in its own loop)
    for the raw loop's prompt, evaluated afresh, and `tokens` tokens sampled as
    the app samples them; the end-of-text token does not stop it early."""
    prompt = engine.tokenize_chat([{"role": "user", "content": STORY}])
    answer = _post(
        url,
        "/completion",
        {
            "prompt": prompt,
            "n_predict": tokens,
            "ignore_eos": True,
            "cache_prompt": False,
            "seed": SAMPLING.seed,
            "temperature": SAMPLING.temperature,
            "top_k": SAMPLING.top_k,
            "top_p": SAMPLING.top_p,
            "min_p": SAMPLING.min_p,
        },
    )
    timings = answer["timings"]
    assert isinstance(timings, dict)
    return float(timings["predicted_per_second"])


def _beside_server_row(
    runs: list[TerminalReply], server: list[float], threads: ThreadCounts
) -> Row:
    """The app's decode against llama-server's own loop at the same threads,
    each run of the app just after one of the server's (medians)."""
    name = "decode: the app in a pseudo-terminal / llama-server's own loop, same threads"
    if not server:
        return Row(name, None, "x", note="no llama-server")
    app_rate = statistics.median(each.decode_tps for each in runs)
    server_rate = statistics.median(server)
    share = app_rate / server_rate
    return Row(
        name,
        share,
        "x",
        ">= 1.0",
        share >= 1.0,
        f"app {app_rate:.1f} tok/s, llama-server {server_rate:.1f} tok/s (its own timing) at "
        f"{threads.decode} thread{'s' * (threads.decode > 1)}, the same prompt and "
        f"{runs[0].tokens} tokens; medians of {len(runs)}, taking turns",
    )


def _decode_thread_row(run: TerminalReply) -> Row:
    """How the thread that ran the reply spent it: a thread waiting for the GIL
    while the UI draws would show as blocked."""
    times = run.decode_thread
    if times is None or times.wall_s <= 0:
        return Row("decode thread in the pseudo-terminal: blocked", None, "%")
    share = 100 / times.wall_s
    return Row(
        "decode thread in the pseudo-terminal: blocked",
        times.blocked_s * share,
        "%",
        note=f"on a core {times.on_cpu_s * share:.0f} %, waiting for a core "
        f"{times.waiting_for_core_s * share:.0f} %, blocked (asleep: the GIL, a lock) "
        f"{times.blocked_s * share:.1f} % of {times.wall_s:.2f} s (kernel schedstat)",
    )


def _native(options: Options, counts: list[int]) -> NativeRates | None:
    binary = bench_binary()
    if binary is None:
        print("llama-bench rows left out: no llama-bench (run .ci/llama-server)", file=sys.stderr)
        return None
    if options.quick:
        return native_rates(binary, options.model, counts, prompt=64, generate=16, repetitions=1)
    return native_rates(binary, options.model, counts)
