"""Tensor parallelism on the CPU (gloo): TP=2 and TP=4 compute what TP=1 does, a worker that raises or is
killed makes `generate` fail fast, after which nothing of the engine is left behind, and a script that
never shuts its engine down exits promptly and leaves nothing behind either."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

from experiments.harness.config import engine_config_from_run_config
from nvllm import SamplingParams
from nvllm.attention.paging import blocks_for
from nvllm.config import EngineConfig, to_dataclass
from nvllm.distributed.group import tp_size
from nvllm.distributed.tensor_parallel import message_capacity, pack_inputs, unpack_inputs
from nvllm.run import compose_config
from nvllm.runner.step_inputs import StepInputs
from tests.helpers import tp_exit_script, tp_held_sockets_script
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.helpers.parallel_oracle import prefill_logits

# 12 blocks of 16 tokens: four 20-token prompts that grow by 40 tokens each need 16, so some are preempted
SETTINGS = dict(kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128, max_num_batched_tokens=64)


def generate_workload(llm) -> list[list[int]]:
    """Greedy generations that go through chunked prefill, preemption and prefix-cache hits."""
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    prefix = random_prompt(40, seed=100)
    batches = [
        [random_prompt(20, seed=i) for i in range(4)],
        [prefix + random_prompt(5, seed=10)],
        [prefix + random_prompt(7, seed=11), prefix + random_prompt(3, seed=12)],  # reuse the prefix's blocks
    ]
    outputs = [o["token_ids"] for prompts in batches for o in llm.generate(prompts, params, use_tqdm=False)]
    stats = llm.stats()
    assert stats["num_preemptions"] > 0 and stats["prefix_cache_hit_rate"] > 0
    return outputs


def assert_released(shm_name: str, worker_pids: list[int]) -> None:
    assert not dist.is_initialized() and tp_size() == 1  # a later engine builds unsharded layers again
    assert not os.path.exists(f"/dev/shm/{shm_name}")
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"nvllm_tp_{os.getpid()}_")]
    assert not multiprocessing.active_children()
    for pid in worker_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# one prefill step's worth (SETTINGS' token budget) of prompts
LOGIT_PROMPTS = [random_prompt(length, seed=50 + length) for length in (5, 20, 36)]
# fp32 on the CPU: a TP rank sums its shard's partial products, then the all-reduce sums the ranks', so the
# order of additions (and nothing else) differs from TP=1
FP32_SUM_ORDER = dict(rtol=1e-4, atol=1e-4)


# the device machines keep NCCL's NVLink multicast off; spawned workers must see the same
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def environment_of(pid: int) -> dict[str, str]:
    entries = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def test_tp2_generates_what_tp1_does(monkeypatch):
    with tiny_llm(**SETTINGS) as llm:
        expected_logits = prefill_logits(llm, LOGIT_PROMPTS)
        expected = generate_workload(llm)
    for name, value in NO_MULTICAST.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    with tiny_llm(tensor_parallel_size=2, **SETTINGS) as llm:
        assert tp_size() == 2
        shm_name, worker_pids = llm.model_runner.shm_name, llm.model_runner.worker_pids
        assert os.path.exists(f"/dev/shm/{shm_name}")
        assert NO_MULTICAST.items() <= environment_of(worker_pids[0]).items()
        assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in os.environ  # set only while the group is made
        torch.testing.assert_close(prefill_logits(llm, LOGIT_PROMPTS), expected_logits, **FP32_SUM_ORDER)
        outputs = generate_workload(llm)
    assert outputs == expected
    assert_released(shm_name, worker_pids)


def test_tp4_computes_what_tp1_does():
    """Four ranks (one KV head each): the logits of one prefill step, and greedy generations."""
    prompts = [random_prompt(12, seed=i) for i in range(3)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with tiny_llm(**SETTINGS) as llm:
        expected_logits = prefill_logits(llm, LOGIT_PROMPTS)
        expected = llm.generate(prompts, params, use_tqdm=False)
    with tiny_llm(tensor_parallel_size=4, **SETTINGS) as llm:
        assert tp_size() == 4 and len(llm.model_runner.worker_pids) == 3
        torch.testing.assert_close(prefill_logits(llm, LOGIT_PROMPTS), expected_logits, **FP32_SUM_ORDER)
        assert llm.generate(prompts, params, use_tqdm=False) == expected


def test_failed_workers_raise_then_a_new_engine_works():
    prompts = [random_prompt(10, seed=i) for i in range(2)]
    short = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)

    llm = tiny_llm(tensor_parallel_size=2, **SETTINGS)
    runner = llm.model_runner
    shm_name, worker_pids = runner.shm_name, runner.worker_pids
    expected = llm.generate(prompts, short, use_tqdm=False)
    runner.workers.broadcast("not a step")  # the worker raises on it and sends its traceback back
    with pytest.raises(RuntimeError, match=r"(?s)worker rank 1 \(pid \d+\) failed:.*Traceback.*TypeError"):
        llm.generate(prompts, short, use_tqdm=False)
    llm.shutdown()
    assert_released(shm_name, worker_pids)

    llm = tiny_llm(tensor_parallel_size=2, **SETTINGS)  # the same process, a new group and buffer
    shm_name, worker_pids = llm.model_runner.shm_name, llm.model_runner.worker_pids
    assert llm.generate(prompts, short, use_tqdm=False) == expected
    killed_at, decoded_before = [], llm.num_decode_tokens

    def kill_a_worker_mid_run():  # a few steps in, whatever the ranks are doing at that moment
        while llm.num_decode_tokens < decoded_before + 10:
            time.sleep(0.01)
        killed_at.append(time.perf_counter())
        os.kill(worker_pids[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_a_worker_mid_run, daemon=True)
    killer.start()
    long = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)  # outlives the kill
    with pytest.raises(RuntimeError, match=r"worker rank 1 \(pid \d+\) was killed by SIGKILL"):
        llm.generate(prompts, long, use_tqdm=False)
    assert time.perf_counter() - killed_at[0] < 10
    with pytest.raises(RuntimeError, match="create a new engine"):
        llm.generate(prompts, short, use_tqdm=False)
    llm.shutdown()
    assert_released(shm_name, worker_pids)


def test_worker_killed_while_idle_raises_instead_of_hanging():
    """A worker killed while it waits for the next message (between two `generate` calls). With
    `multiprocessing.Event`s this hung rank 0 forever in the next `Event.set()`."""
    prompts = [random_prompt(10, seed=i) for i in range(2)]
    short = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    llm = tiny_llm(tensor_parallel_size=2, **SETTINGS)
    shm_name, worker_pids = llm.model_runner.shm_name, llm.model_runner.worker_pids
    llm.generate(prompts, short, use_tqdm=False)
    time.sleep(0.2)  # the worker is back waiting for a message
    os.kill(worker_pids[0], signal.SIGKILL)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"worker rank 1 \(pid \d+\) was killed by SIGKILL"):
        llm.generate(prompts, short, use_tqdm=False)
    assert time.perf_counter() - start < 10
    llm.shutdown()
    assert_released(shm_name, worker_pids)


def test_parallel_configs_and_sizes_that_do_not_divide_the_heads():
    for size, model in [(2, "tiny"), (4, "tiny"), (8, "qwen3-8b")]:
        config = engine_config_from_run_config(compose_config([f"parallel=tp{size}", f"model={model}"]))
        assert config.parallel.tensor_parallel_size == size
    with pytest.raises(ValueError, match="tensor_parallel_size=8 must divide .* num_key_value_heads=4"):
        engine_config_from_run_config(compose_config(["parallel=tp8", "model=tiny"]))  # a KV head per rank
    with pytest.raises(ValueError, match="tensor_parallel_size=3 must divide num_attention_heads=8"):
        tiny_llm(tensor_parallel_size=3)


def test_a_second_group_in_one_process_is_refused_and_the_first_left_alone():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="already initialized"):
            tiny_llm(tensor_parallel_size=2)
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("overrides", [{}, {"cache.block_size": 16, "scheduler.max_model_len": 40960}])
def test_the_largest_step_the_config_allows_fits_the_buffer(overrides):
    nested = {}
    for key, value in overrides.items():
        group, leaf = key.split(".")
        nested.setdefault(group, {})[leaf] = value
    config = to_dataclass(EngineConfig, nested)
    sched, block_size = config.scheduler, config.cache.block_size
    tokens, seqs = sched.max_num_batched_tokens, sched.max_num_seqs
    width = blocks_for(sched.max_model_len, block_size)
    largest = StepInputs(
        input_ids=torch.zeros(tokens, dtype=torch.int64),
        token_rows=None,
        sampled_rows=torch.zeros(seqs, dtype=torch.int64),
        positions=torch.zeros(tokens, dtype=torch.int64),
        slot_mapping=torch.zeros(tokens, dtype=torch.int64),
        cu_seqlens_q=torch.zeros(seqs + 1, dtype=torch.int32),
        seqlens_k=torch.full((seqs,), sched.max_model_len, dtype=torch.int32),
        block_tables=torch.zeros(seqs, width, dtype=torch.int32),
        max_seqlen_q=tokens,
        max_seqlen_k=sched.max_model_len,
        logits_indices=torch.zeros(seqs, dtype=torch.int64),
        is_prefill=True,
    )
    packed = pack_inputs(largest, width)
    assert len(pickle.dumps([packed], protocol=pickle.HIGHEST_PROTOCOL)) <= message_capacity(config)
    unpacked = unpack_inputs(packed)
    for field in dataclasses.fields(StepInputs):
        torch.testing.assert_close(getattr(unpacked, field.name), getattr(largest, field.name))
    # a decode round: every sequence, full block tables, `num_decode_steps` steps
    decode_step = dataclasses.replace(
        largest,
        input_ids=None,
        token_rows=torch.zeros(seqs, dtype=torch.int64),
        positions=torch.zeros(seqs, dtype=torch.int64),
        slot_mapping=torch.zeros(seqs, dtype=torch.int64),
        max_seqlen_q=2,
        is_prefill=False,
    )
    round_message = [pack_inputs(decode_step, width) for _ in range(sched.num_decode_steps)]
    assert len(pickle.dumps(round_message, protocol=pickle.HIGHEST_PROTOCOL)) <= message_capacity(config)


@pytest.mark.parametrize("how", ["return", "kept"])
def test_a_script_that_never_shuts_its_engine_down_exits_promptly_and_leaves_nothing(how):
    """The engine collected when `main()` returns, or still alive at interpreter exit."""
    ended = tp_exit_script.run(how, "cpu", timeout_s=180)
    assert ended.returncode == 0, ended.stderr
    # the resource tracker names what was left behind (semaphores, shared memory); not nanobind's report of
    # Triton's own objects alive at the interpreter's exit, a known issue of Triton's bindings
    assert "resource_tracker" not in ended.stderr and "Traceback" not in ended.stderr, ended.stderr
    assert not os.path.exists(f"/dev/shm/{ended.shm}")
    assert not any(tp_exit_script.alive(pid) for pid in ended.worker_pids)
    assert ended.exit_s < 20, f"{ended.exit_s:.1f}s from the end of generate to the end of the process"


def test_workers_end_when_rank0_is_killed():
    ended = tp_exit_script.run("killed", "cpu", timeout_s=180)
    assert ended.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while any(tp_exit_script.alive(pid) for pid in ended.worker_pids):
        assert time.monotonic() < deadline, "a worker outlived rank 0 by 10 s"
        time.sleep(0.05)


class NeverDone:
    """A CUDA event for work that never ends: a collective whose peer is dead, as NCCL leaves it."""

    def query(self) -> bool:
        return False


def test_rank0_waiting_for_the_device_sees_a_dead_worker():
    llm = tiny_llm(tensor_parallel_size=2, **SETTINGS)
    runner = llm.model_runner
    shm_name, worker_pids = runner.shm_name, runner.worker_pids
    os.kill(worker_pids[0], signal.SIGKILL)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"worker rank 1 \(pid \d+\) was killed by SIGKILL"):
        runner.wait_for_device(NeverDone())
    assert time.perf_counter() - start < 10
    llm.shutdown()
    assert_released(shm_name, worker_pids)


def test_a_worker_killed_while_a_process_it_left_holds_its_sockets_is_seen_within_seconds(tmp_path):
    """A killed worker whose connections stay open (a process it forked holds them) never fails rank 0's
    collective: rank 0 must see the death itself, and end what the worker left behind."""
    script = [sys.executable, "-m", "tests.helpers.tp_held_sockets_script"]
    env = {**os.environ, tp_held_sockets_script.HELD_PID_FILE: str(tmp_path / "held.pid")}
    done = subprocess.run(script, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert re.search(r"worker rank 1 \(pid \d+\) was killed by SIGKILL", report["error"]), report
    assert report["seconds"] < 10
    assert not report["holder_outlived"]
