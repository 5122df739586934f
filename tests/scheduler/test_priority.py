"""`scheduler.policy=priority`: lower values served first, the lowest priority preempted first, a request of
higher priority preempting running ones for blocks; `fcfs` as before."""

import pytest

from nvllm import SamplingParams
from nvllm.scheduler.sequence import Sequence
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.helpers.scheduler_utils import bare_scheduler

BLOCK_SIZE = 16
GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
LOW, HIGH = 5, 0


def run_mixed(policy: str):
    """Two low-priority requests run a few rounds on a small cache; then two high-priority ones arrive.
    Returns the order the requests finished in (by name), the preempted ones and the outputs."""
    with tiny_llm(
        kvcache_block_size=BLOCK_SIZE, num_kvcache_blocks=6, num_decode_steps=4, scheduler__policy=policy
    ) as llm:
        preempted = []
        lifecycle = llm.scheduler.lifecycle
        preempt = lifecycle.preempt

        def spy(seq):
            preempted.append(names[seq.seq_id])
            preempt(seq)

        lifecycle.preempt = spy
        names, order = {}, []
        seqs = {}
        for name in ("low0", "low1"):
            seqs[name] = llm.add_request(random_prompt(20, len(names)), GREEDY, priority=LOW)
            names[seqs[name].seq_id] = name
        for _ in range(3):
            order += [names[s.seq_id] for s in llm.step()]
        for name in ("high0", "high1"):
            seqs[name] = llm.add_request(random_prompt(20, len(names)), GREEDY, priority=HIGH)
            names[seqs[name].seq_id] = name
        while not llm.is_finished():
            order += [names[s.seq_id] for s in llm.step()]
        return order, preempted, {name: seq.completion_token_ids for name, seq in seqs.items()}


def test_high_priority_requests_preempt_and_finish_first():
    order, preempted, outputs = run_mixed("priority")
    assert set(order[:2]) == {"high0", "high1"}
    assert preempted[:2] == ["low1", "low0"]  # the low ones first, the newest of them first
    fcfs_order, fcfs_preempted, fcfs_outputs = run_mixed("fcfs")
    assert set(fcfs_order[:2]) == {"low0", "low1"}  # as before: in arrival order
    assert all(name.startswith("high") or name == "low1" for name in fcfs_preempted)  # the newest first
    assert outputs == fcfs_outputs  # greedy tokens do not depend on the order


def test_generate_takes_priorities_and_gives_the_same_outputs():
    prompts = [random_prompt(24, seed) for seed in range(6)]
    with tiny_llm(kvcache_block_size=BLOCK_SIZE, num_kvcache_blocks=8, scheduler__policy="priority") as llm:
        prioritised = llm.generate(prompts, GREEDY, use_tqdm=False, priority=[3, 2, 1, 0, 0, 1])
        assert llm.stats()["num_preemptions"] > 0
    with tiny_llm(kvcache_block_size=BLOCK_SIZE, num_kvcache_blocks=8) as llm:
        assert llm.generate(prompts, GREEDY, use_tqdm=False) == prioritised


def test_waiting_requests_are_admitted_by_priority_then_arrival():
    scheduler = bare_scheduler(num_blocks=2, policy="priority")
    seqs = [Sequence([1, 2, 3, 4, 5], SamplingParams(max_tokens=3), priority=p) for p in (2, 0, 1, 0)]
    for seq in seqs:
        scheduler.add(seq)
    assert list(scheduler.waiting) == [seqs[1], seqs[3], seqs[2], seqs[0]]
    batch = scheduler.schedule()  # two blocks: room for one prompt
    assert batch.seqs == [seqs[1]]


def test_decode_preempts_the_lowest_priority_newest_among_equals():
    scheduler = bare_scheduler(num_blocks=4, policy="priority")
    old_low, high, new_low = (
        Sequence([1, 2, 3, 4], SamplingParams(max_tokens=20), priority=p) for p in (1, 0, 1)
    )
    for seq in (old_low, high, new_low):
        scheduler.add(seq)
    batch = scheduler.schedule()
    scheduler.launched(batch)
    scheduler.postprocess(batch, [[9]] * 3)  # a full block each, the fifth token's K/V goes to a new one
    assert scheduler.running == [high, old_low, new_low]
    scheduler.schedule()  # every sequence needs a second block; one is free
    assert new_low.status.name == "WAITING" and old_low.status.name == "RUNNING"


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="scheduler.policy='lifo'"):
        tiny_llm(scheduling_policy="lifo")


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_a_higher_priority_arrival_preempts_for_blocks_under_priority_only(policy):
    scheduler = bare_scheduler(num_blocks=4, policy=policy)
    low = Sequence(list(range(12)), SamplingParams(max_tokens=20), priority=1)  # 3 of the 4 blocks
    scheduler.add(low)
    batch = scheduler.schedule()
    scheduler.launched(batch)
    scheduler.postprocess(batch, [[9]])
    high = Sequence(list(range(100, 108)), SamplingParams(max_tokens=20), priority=0)  # needs 2 blocks
    scheduler.add(high)
    batch = scheduler.schedule()
    if policy == "priority":
        assert batch.is_prefill and batch.seqs == [high] and low.status.name == "WAITING"
        assert scheduler.num_preemptions == 1
    else:
        assert not batch.is_prefill and batch.seqs == [low] and high.status.name == "WAITING"
        assert scheduler.num_preemptions == 0
