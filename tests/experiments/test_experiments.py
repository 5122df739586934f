"""The experiment runners on a tiny model: what they report and write (results.json, offline wandb runs),
and engines that release everything when they shut down. Sweeps: test_sweep_summary.py."""

import gc
import json
import os
import weakref
from multiprocessing import resource_tracker
from pathlib import Path

import pytest
import torch

from experiments.harness.config import workload_config
from experiments.harness.workload import MAX_RANDOM_TOKEN_ID, make_requests
from experiments.runners import bench, generate, latency
from nvllm import LLM, SamplingParams
from nvllm.run import compose_config
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY, logged, run_file_holding

REPEATED_METRICS = {
    "output_tokens",
    "wall_s",
    "output_tok_per_s",
    "prefill_tok_per_s",
    "decode_tok_per_s",
    "prefix_cache_hit_rate",
    "kernel_compiles",
    *(f"{phase}_{kind}" for phase in ("prefill", "decode") for kind in ("mfu", "mbu")),
}
BENCH_METRICS = {
    *(name + suffix for name in REPEATED_METRICS for suffix in ("", "_min", "_max")),
    "startup_s",
    "load_s",
    "compile_s",
    "capture_s",
    "peak_gpu_memory_gib",
    "num_kv_blocks",
    "num_preemptions",
}


def test_random_workload_is_seeded_and_in_range():
    workload = workload_config(compose_config(["+experiment=bench", "workload.num_seqs=50"]))
    prompts, params = make_requests(workload, vocab_size=1000)
    assert (prompts, params) == make_requests(workload, vocab_size=1000)
    assert all(100 <= len(prompt) <= 1024 and all(0 <= t < 1000 for t in prompt) for prompt in prompts)
    assert all(100 <= p.max_tokens <= 1024 and p.ignore_eos and p.temperature == 0.6 for p in params)
    assert len({len(prompt) for prompt in prompts}) > 1


def test_bench_workload_is_nano_vllms():
    """The very requests of nano-vLLM's bench.py: its published run generates 133,966 tokens."""
    _, params = make_requests(workload_config(compose_config(["+experiment=bench"])), vocab_size=151936)
    assert len(params) == 256 and sum(p.max_tokens for p in params) == 133_966


def test_text_prompts_are_cycled():
    workload = workload_config(compose_config(["workload.num_seqs=6"]))
    prompts, params = make_requests(workload, vocab_size=1000)
    assert prompts == (workload.prompts * 2)[:6] and {p.max_tokens for p in params} == {workload.output_len}


def test_demo_prints_completions_and_throughput(tmp_path, capsys):
    cfg = compose_config([*TINY, "wandb.mode=disabled", "workload.num_seqs=2", "workload.output_len=3"])
    metrics = generate.run(cfg, tmp_path)
    printed = capsys.readouterr().out
    assert printed.count("Prompt: ") == 2 and "Completion: " in printed and "tok/s" in printed
    assert metrics["output_tokens"] == 6 and (tmp_path / "results.json").is_file()


def test_bench_reports_writes_and_logs(tmp_path, capsys):
    cfg = compose_config(["+experiment=bench", *TINY, *SMALL_WORKLOAD])
    metrics = bench.run(cfg, tmp_path, name="test-bench")
    assert set(metrics) == BENCH_METRICS and metrics["output_tokens"] == metrics["output_tokens_max"]
    # any vocabulary beyond nano-vLLM's token-id range draws the same requests as the engine's
    requests = make_requests(workload_config(cfg), vocab_size=MAX_RANDOM_TOKEN_ID + 1)
    expected_tokens = sum(p.max_tokens for p in requests[1])
    assert metrics["output_tokens"] == expected_tokens and metrics["output_tok_per_s"] > 0
    assert metrics["num_kv_blocks"] == 256 and metrics["peak_gpu_memory_gib"] is None  # CPU
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["metrics"] == {**metrics, "repeats": 1} and results["config"]["cache"]["block_size"] == 16
    expected = (*logged("output_tok_per_s", metrics["output_tok_per_s"]), b"test-bench")  # + the run's name
    data = run_file_holding(tmp_path, *expected)
    assert all(item in data for item in expected)
    assert "Throughput:" in capsys.readouterr().out


def test_latency_times_every_token(tmp_path):
    cfg = compose_config(
        [
            "+experiment=latency",
            *TINY,
            "wandb.mode=disabled",
            "workload.input_len=16",
            "workload.output_len=8",
        ]
    )
    metrics = latency.run(cfg, tmp_path)
    assert metrics["output_tokens"] == 8 and metrics["time_to_first_token_ms"] > 0
    p50, p90, p99 = (metrics[f"token_latency_p{p}_ms"] for p in (50, 90, 99))
    assert 0 < p50 <= p90 <= p99


# ---- isolation: jobs share one process, so a shut-down engine must leave nothing behind ---------------
def child_pids() -> set[int]:
    """Live and zombie children of this process (an unjoined worker stays a zombie)."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent_pid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent_pid == os.getpid():
            children.add(int(stat.parent.name))
    return children


def engine_child_pids() -> set[int]:
    """Children other than multiprocessing's resource tracker: one per process, started with the first
    shared memory segment or spawned worker, and meant to outlive every engine."""
    return child_pids() - {resource_tracker._resource_tracker._pid}


def mapped_shared_memory(pids: set[int]) -> set[str]:
    """The /dev/shm segments these processes map: the engine's own, whatever other tests do meanwhile."""
    segments = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        segments |= {
            "/dev/shm/" + line.split("/dev/shm/")[1].removesuffix(" (deleted)")
            for line in maps.splitlines()
            if "/dev/shm/" in line
        }
    return segments


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def tensor_parallel_available() -> bool:
    try:
        import nvllm.distributed.tensor_parallel  # noqa: F401
    except ImportError:
        return False
    return True


NO_TENSOR_PARALLEL = pytest.mark.skipif(not tensor_parallel_available(), reason="no tensor_parallel module")


@pytest.mark.parametrize("tensor_parallel_size", [1, pytest.param(2, marks=NO_TENSOR_PARALLEL)])
def test_engines_release_everything(tensor_parallel_size):
    children_before = engine_child_pids()
    segments, rss_after_engine = set(), []
    for _ in range(3):
        with LLM(
            "tiny",
            enforce_eager=True,
            kvcache_block_size=16,
            num_kvcache_blocks=64,
            tensor_parallel_size=tensor_parallel_size,
        ) as llm:
            llm.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
            segments |= mapped_shared_memory({os.getpid(), *child_pids()})
        del llm  # no gc.collect(): the engine must not depend on a collection to let go
        rss_after_engine.append(rss_mib())
        assert engine_child_pids() <= children_before, "a worker process outlived its engine"
        assert not any(os.path.exists(segment) for segment in segments), "shared memory left linked"
        assert not torch.distributed.is_initialized()
    # The first engine pays one-off costs (tokenizer, allocator pools); a leak would add the tiny model's
    # ~160 MiB of weights for each later engine.
    assert rss_after_engine[2] - rss_after_engine[0] < 64, rss_after_engine


def test_shutdown_frees_the_weights_without_a_garbage_collection():
    """Reference cycles (a parameter holding its module's bound loader, say) would keep the weights until
    the collector runs: in a sweep's process, or on a GPU, that is memory held across jobs."""
    gc.collect()
    gc.disable()
    try:
        llm = LLM("tiny", enforce_eager=True, kvcache_block_size=16, num_kvcache_blocks=16)
        llm.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
        model = llm.model_runner.model
        weights = [weakref.ref(param) for param in model.parameters()]
        engine, model = weakref.ref(llm), weakref.ref(model)
        llm.shutdown()
        assert model() is None and all(weight() is None for weight in weights)
        del llm
        assert engine() is None
    finally:
        gc.enable()


@pytest.mark.gpu
def test_engines_leave_no_growing_gpu_memory():
    """Memory after each engine's shutdown is what it was after the first one's. (The first engine of a
    process may leave one-off allocations, e.g. a cuBLAS workspace for the CUDA-graph capture stream.)"""
    after_first = None
    for _ in range(3):
        # two layers of the 0.6B shape: head_dim 128, which flash-attn builds trimmed to that one serve
        engine = LLM("qwen3-0.6b", model__num_hidden_layers=2, num_kvcache_blocks=64, device="cuda")
        with engine as llm:
            llm.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
        del llm, engine
        gc.collect()
        if after_first is None:
            after_first = torch.cuda.memory_allocated()
        assert torch.cuda.memory_allocated() == after_first
