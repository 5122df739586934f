"""`GraphPlan`: which shapes get a CUDA graph, decided from the config and what the backend declares, and how
steps are padded to them — against values worked out by hand."""

import dataclasses

from nvllm.attention import FlashAttnBackend, TorchBackend
from nvllm.config import CompileConfig, EngineConfig, SchedulerConfig
from nvllm.runner.graph_plan import GraphPlan


def config(**compile_settings) -> EngineConfig:
    """A config as `resolve` leaves it on a GPU, compiled, with 40 sequences and a budget of 100 tokens."""
    return EngineConfig(
        device="cuda",
        scheduler=SchedulerConfig(max_num_seqs=40, max_num_batched_tokens=100),
        compile=CompileConfig(enabled=True, **compile_settings),
    )


def test_plan_of_a_compiled_engine_on_cuda_with_a_backend_whose_graphs_run():
    plan = GraphPlan.of(config(), FlashAttnBackend)
    assert plan.decode_sizes == (2, 4, 8, 16, 32, 40)  # up to max_num_seqs, the largest its own size
    assert plan.prefill_buckets == (16, 32, 64)  # none above the budget of 100 tokens
    assert plan.decode_max_seqlen_q == 2
    assert GraphPlan.of(config(max_capture_batch_size=20), FlashAttnBackend).decode_sizes == (2, 4, 8, 16, 20)
    assert GraphPlan.of(config(max_prefill_graph_tokens=32), FlashAttnBackend).prefill_buckets == (16, 32)
    assert GraphPlan.of(config(compile_prefill=False), FlashAttnBackend).prefill_buckets == ()


def test_no_graphs_for_a_backend_that_declares_none_for_the_cpu_or_the_eager_model():
    assert GraphPlan.of(config(), TorchBackend) == GraphPlan()
    assert GraphPlan.of(dataclasses.replace(config(), device="cpu"), FlashAttnBackend) == GraphPlan()
    eager = dataclasses.replace(config(), compile=CompileConfig(enabled=False))
    assert GraphPlan.of(eager, FlashAttnBackend) == GraphPlan()
    assert not GraphPlan().has_graphs


def test_decode_batches_padded_to_the_smallest_captured_size_that_holds_them():
    plan = GraphPlan(decode_sizes=(2, 4, 8))
    assert [plan.decode_batch_size(n) for n in (1, 2, 3, 5, 8, 9)] == [2, 2, 4, 8, 8, 9]
    assert [GraphPlan().decode_batch_size(n) for n in (1, 3)] == [2, 3]  # no graphs: the padding rule alone


def test_a_prefill_step_takes_the_smallest_bucket_that_holds_it_if_its_rows_fit():
    plan = GraphPlan(prefill_buckets=(16, 32), prefill_graph_seqs=4)
    assert plan.prefill_bucket(num_tokens=3, num_seqs=2, num_logits=2) == 16
    assert plan.prefill_bucket(num_tokens=17, num_seqs=4, num_logits=4) == 32
    assert plan.prefill_bucket(num_tokens=33, num_seqs=1, num_logits=1) is None  # above the largest bucket
    assert plan.prefill_bucket(num_tokens=8, num_seqs=5, num_logits=5) is None  # more sequences than it holds
    assert plan.prefill_bucket(num_tokens=8, num_seqs=2, num_logits=5) is None  # a prompt's forks sample too
    assert GraphPlan().prefill_bucket(num_tokens=8, num_seqs=2, num_logits=2) is None
