"""The CUDA-graph machinery (`GraphRunner`) on the CPU, with a stand-in graph that
replays by running the recorded call again on the same static buffers: input copies, padding to captured
shapes, the choice of graph and the slicing of its logits — everything but CUDA itself (the `gpu` tests
run the real graphs)."""

import pytest
import torch
import torch._dynamo.utils

from nvllm import SamplingParams
from nvllm.attention import FlashAttnBackend, TorchBackend, cascade
from nvllm.runner import graph_runner
from nvllm.runner.graph_plan import GraphPlan
from nvllm.runner.graph_runner import GraphRunner
from tests.helpers.engine_utils import random_prompt, tiny_llm


class ReplayedOnTheHost:
    def __init__(self, forward, args):
        self.forward, self.args = forward, args
        self.output = forward(*args)
        self.replays = 0
        self.destroyed = False

    def replay(self) -> None:
        self.output.copy_(self.forward(*self.args))  # a graph writes into the memory it recorded
        self.replays += 1

    def pool(self):
        return None

    def reset(self) -> None:
        self.destroyed = True


def kv_heads(runner) -> int:
    return runner.config.model.num_key_value_heads  # one rank: all of them


class SplittingTorchBackend(TorchBackend):
    """The torch backend (which has nothing to split) choosing decode KV splits as flash-attn does, so that
    graphs whose decode attention runs other kernels are told apart."""

    decode_kv_splits = FlashAttnBackend.decode_kv_splits


@pytest.fixture
def graphs_on_the_host(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)

    warm_ups = []  # whether each graph recorded ran outside a capture first

    def record(forward, args, pool, warm_up):
        warm_ups.append(warm_up)
        graph = ReplayedOnTheHost(forward, args)
        return graph, graph.output

    monkeypatch.setattr(graph_runner, "record", record)
    return warm_ups


def test_engine_on_recorded_graphs_gives_the_tokens_of_the_plain_engine(graphs_on_the_host):
    prompts = [random_prompt(n, seed=900 + n) for n in (5, 17, 9, 70, 3, 41)]  # the first 3: 31 tokens
    params = [
        SamplingParams(temperature=0, max_tokens=20),
        SamplingParams(temperature=0.9, seed=3, max_tokens=25),
        SamplingParams(temperature=0, max_tokens=9),
    ] * 2
    # no prefix cache: the second run computes what the first did (chunks after a computed prefix remain)
    settings = dict(
        kvcache_block_size=4, max_model_len=128, max_num_batched_tokens=48, enable_prefix_caching=False
    )
    with tiny_llm(**settings) as llm:

        def run_both():
            return [
                llm.generate(prompts[:3], params[:3], use_tqdm=False),  # 31 tokens in one step
                llm.generate(prompts[4:5], params[4:5], use_tqdm=False),  # 3 tokens
                llm.generate(prompts, params, use_tqdm=False),  # chunks of 48 tokens, no graph
            ]

        expected = run_both()
        runner = llm.model_runner
        plan = GraphPlan(decode_sizes=(2, 4, 8), prefill_buckets=(16, 32))
        llm.inputs.plan = plan  # decode batches now padded as for captured graphs
        runner.graph_runner = graphs = GraphRunner(
            runner.model, runner.backend, plan, "cpu", runner.token_table, kv_heads(runner)
        )
        got = run_both()
        recorded = dict(graphs.graphs)
    assert got == expected
    # destroyed on shutdown, not left to the garbage collector (NCCL waits for graphs holding collectives)
    assert all(graph.destroyed for graph in recorded.values()) and not graphs.graphs
    replays = {key: graph.replays for key, graph in recorded.items()}
    # every kind of graph ran: decode batches of each padded size, and prefill steps of each bucket
    assert all(replays["decode", size] for size in (2, 4, 8)), replays
    assert all(replays["prefill", tokens] for tokens in (16, 32)), replays


def test_cascade_steps_replay_graphs_of_their_own(graphs_on_the_host, monkeypatch):
    # batches of 2 and 4 rows cut prefixes into chunks, of 8 not: graphs of both shapes, one set of buffers
    monkeypatch.setattr(cascade, "PREFIX_CHUNKS_BY_ROWS", ((4, 4),))
    prefix = random_prompt(13, 950)
    prompts = [prefix + random_prompt(2 + i, 960 + i) for i in range(5)] + [random_prompt(6, 970)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with tiny_llm(kvcache_block_size=4, max_model_len=64, attention__cascade="on") as llm:
        expected = llm.generate(prompts, params, use_tqdm=False)
        runner = llm.model_runner
        llm.inputs.plan = plan = GraphPlan(decode_sizes=(2, 4, 8))
        backend = SplittingTorchBackend(runner.backend.block_size, runner.backend.max_model_len, "on")
        runner.graph_runner = graphs = GraphRunner(
            runner.model, backend, plan, "cpu", runner.token_table, kv_heads(runner)
        )
        got = llm.generate(prompts, params, use_tqdm=False)
        replays = {key: graph.replays for key, graph in graphs.graphs.items()}  # before shutdown frees them
        # the graphs attended by the plan, not by the empty one they were recorded with
        prefix_lens = sorted(graphs.static["cascade"]["prefix_lens"][:6].tolist())
    assert got == expected
    # 2 kinds x 3 sizes, in 4 classes of the same kernels (the tiny model's 4 KV heads: decode attention
    # in 32 KV splits at 2 and 4 rows, in 16 at 8): one warm-up each
    assert len(graphs_on_the_host) == 6 and sum(graphs_on_the_host) == 4
    assert replays["cascade", 8], replays  # the six, padded to 8, with their prefix group
    assert prefix_lens == [0] + [12] * 5


def test_cascade_graphs_of_every_chunking_run_the_one_compiled_cascade_graph(graphs_on_the_host, monkeypatch):
    """Graphs of batches whose plans cut prefixes into chunks and of batches whose plans do not take views of
    one set of buffers: every view must look alike to dynamo (contiguous), or each kind compiles anew."""
    monkeypatch.setattr(cascade, "PREFIX_CHUNKS_BY_ROWS", ((4, 4),))
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    settings = dict(kvcache_block_size=4, max_model_len=64, attention__cascade="on", compile__enabled=True)
    with tiny_llm(**settings) as llm:
        compiled = counters["stats"]["unique_graphs"]
        runner = llm.model_runner
        graphs = GraphRunner(
            runner.compiled_model,
            runner.backend,
            GraphPlan(decode_sizes=(2, 4, 8)),
            "cpu",
            runner.token_table,
            kv_heads(runner),
        )
        assert {key[:2] for key in graphs.graphs} >= {("cascade", 4), ("cascade", 8)}
        assert counters["stats"]["unique_graphs"] == compiled, "a graph's buffers made dynamo compile again"
