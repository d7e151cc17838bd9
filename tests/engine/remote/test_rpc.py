"""One model over several machines: kvchat attached to a llama-server that
spreads the demo model over two of llama.cpp's rpc-servers (`llama-server
--rpc A,B -ngl 99`), all on loopback. The binaries come from .ci/llama-server.

`pytest -s` prints the layer split llama.cpp reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.remote.engine import RemoteEngine
from chat.settings.schema import SamplingSettings
from tests.engine.remote.conftest import connect_to, reply_cut_by_a_killed_server, run_reply
from tests.servers import RpcCluster, layer_split, llama_server_over_rpc

pytestmark = pytest.mark.model

ASK = {"role": "user", "content": "Name three colours."}
GREEDY = SamplingSettings(temperature=0, max_tokens=24)
DEMO_LAYERS = 30
"""The demo model's repeating layers; llama.cpp counts the output layer as one more."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RpcCluster]:
    with llama_server_over_rpc(tmp_path_factory.mktemp("rpc")) as running:
        yield running


@pytest.fixture
def engine(cluster: RpcCluster) -> Iterator[RemoteEngine]:
    connected = connect_to(cluster.server)
    yield connected
    connected.close()


def test_both_rpc_servers_hold_layers(cluster: RpcCluster) -> None:
    log = cluster.server.log_text()
    split = layer_split(log)
    print("\nlayer split llama.cpp reports (llama-server --rpc over two rpc-servers):")
    for share in split:
        print("  " + share.describe())
    offloaded = next(line for line in log.splitlines() if "offloaded" in line)
    print("  " + offloaded.split("load_tensors: ", 1)[-1])
    assert [share.address for share in split] == [w.address for w in cluster.workers]
    assert all(share.layers and share.model_mib > 0 and share.kv_mib > 0 for share in split)
    # Every layer (and the output layer) went to one of them, none to the host.
    held = sorted(n for share in split for n in share.layers)
    assert held == list(range(DEMO_LAYERS + 1))
    assert f"offloaded {DEMO_LAYERS + 1}/{DEMO_LAYERS + 1} layers" in log


def test_window_exact_counts_a_streamed_reply_and_reuse(engine: RemoteEngine) -> None:
    info = engine.info
    assert info.kind == "llama-server" and info.n_ctx == 4096 and info.count_exact
    first = [{"role": "system", "content": "You are spread over two machines."}, ASK]
    counted = engine.tokenize_chat(first)
    tokens, finished = run_reply(engine, first, GREEDY)
    # It streamed: several token events, which make up the text.
    assert len(tokens) > 1 and finished.text == "".join(t.text for t in tokens)
    assert finished.text.strip() and finished.error is None
    stats = finished.stats
    assert stats.prompt_tokens == len(counted)  # the server's prompt_n + cache_n
    second = [*first, {"role": "assistant", "content": finished.text}, ASK]
    counted_again = engine.tokenize_chat(second)
    _, again = run_reply(engine, second, GREEDY)
    assert again.stats.prompt_tokens == len(counted_again)
    # The layers' KV cache lives on the rpc-servers, and it is reused there.
    assert again.stats.prompt_reused >= len(counted) - 5
    assert again.stats.prompt_evaluated < len(counted_again) - len(counted) + 10
    print(
        f"\nturn 2 over RPC: {again.stats.prompt_tokens} prompt tokens, "
        f"{again.stats.prompt_reused} reused, {again.stats.prompt_evaluated} evaluated"
    )


def test_an_rpc_server_killed_mid_reply_keeps_the_partial_reply(tmp_path: Path) -> None:
    """llama.cpp cannot go on without a device that holds layers: llama-server
    aborts ("Remote RPC server crashed or returned malformed response"). What
    kvchat sees is its model server gone: the reply so far is kept and the
    message names that server (llama-server does not say, over HTTP, which
    rpc-servers it uses, so kvchat cannot name the one that died)."""
    story = [{"role": "user", "content": "Write a very long story about a ship."}]
    with llama_server_over_rpc(tmp_path) as doomed:
        finished = reply_cut_by_a_killed_server(doomed.server, story, doomed.workers[1].kill)
        assert finished.text.strip()
        assert finished.error is not None and "Traceback" not in finished.error
        print(f"\nkvchat says: {finished.error}")
        doomed.server.process.wait(30)
        assert "Remote RPC server crashed" in doomed.server.log_text()
