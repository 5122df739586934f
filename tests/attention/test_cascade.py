"""Cascade attention on the CPU (torch backend, fp32): a decode step by cascade gives the logits of the same
step attended the plain way, in every shape of prefix sharing, and generation is unchanged by it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch._dynamo.utils

from nvllm import SamplingParams
from nvllm.attention import cascade
from nvllm.attention.cascade import cascade_pays, plan_cascade, prefix_groups
from nvllm.layers.cascade_attention import merge_partials
from tests.helpers.engine_utils import random_prompt, tiny_llm

BLOCK = 4
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


# relative to the step's largest logit (~10 here): fp32 rounding over the layers puts the paths ~1e-6 apart
TOLERANCE = 1e-5


@dataclasses.dataclass
class Compared:
    worst: float  # the largest logit difference over what the tolerance allows (at most 1 passes)
    groups: list[tuple[int, int]]  # (rows, prefix tokens) of each group
    preemptions_before: int


@contextmanager
def cascade_against_plain(llm) -> Iterator[list[Compared]]:
    """Every decode step with a cascade plan also runs without it (the same KV written twice); the step
    goes on with the cascade logits, and how far they are from the plain ones is recorded."""
    runner, compared = llm.model_runner, []
    forward = runner.forward

    def both(inputs):
        if inputs.cascade is None:
            return forward(inputs)
        plain = forward(dataclasses.replace(inputs, cascade=None)).clone()
        by_cascade = forward(inputs)
        plan = inputs.cascade
        cu_q, cu_k = plan.prefix_cu_seqlens_q.tolist(), plan.prefix_cu_seqlens_k.tolist()
        prefix_of: dict[tuple, int] = {}  # a group's rows → its prefix, summed over its chunks' slots
        for slot in range(len(cu_q) - 1):
            rows = tuple(plan.prefix_query_rows[cu_q[slot] : cu_q[slot + 1]].tolist())
            prefix_of[rows] = prefix_of.get(rows, 0) + cu_k[slot + 1] - cu_k[slot]
        groups = [(len(rows), prefix) for rows, prefix in prefix_of.items()]
        compared.append(
            Compared(
                worst=((plain - by_cascade).abs().max() / (TOLERANCE * plain.abs().max())).item(),
                groups=[group for group in groups if group[0]],
                preemptions_before=llm.scheduler.num_preemptions,
            )
        )
        return by_cascade

    runner.forward = both
    try:
        yield compared
    finally:
        del runner.forward


def shared(prefix: list[int], count: int, seed: int, suffix_len: int = 3) -> list[list[int]]:
    return [prefix + random_prompt(suffix_len + i % 3, seed + i) for i in range(count)]


def run_compared(prompts: list[list[int]], **overrides) -> list[Compared]:
    settings = dict(kvcache_block_size=BLOCK, max_model_len=96, attention__cascade="on")
    with tiny_llm(**(settings | overrides)) as llm, cascade_against_plain(llm) as compared:
        llm.generate(prompts, GREEDY, use_tqdm=False)
    assert compared, "no decode step was served by cascade"
    worst = max(step.worst for step in compared)
    assert worst <= 1, f"cascade logits {worst:.1f}x the tolerance from the plain path's"
    return compared


def test_one_group_equals_plain_attention():
    compared = run_compared(shared(random_prompt(21, 1), 5, seed=10))
    assert any(step.groups == [(5, 20)] for step in compared), [step.groups for step in compared]


def test_several_groups_equal_plain_attention():
    prompts = (
        shared(random_prompt(13, 2), 3, seed=20)
        + shared(random_prompt(26, 3), 4, seed=30)
        + shared(random_prompt(9, 4), 2, seed=40)
    )
    compared = run_compared(prompts)
    assert any(sorted(step.groups) == [(2, 8), (3, 12), (4, 24)] for step in compared)


def test_a_prefix_of_exactly_one_block():
    compared = run_compared(shared(random_prompt(BLOCK, 5), 4, seed=50, suffix_len=5))
    assert any(step.groups == [(4, BLOCK)] for step in compared)


def test_sequences_that_share_nothing_beside_a_group():
    loners = [random_prompt(length, 60 + length) for length in (3, 11, 17)]
    prompts = shared(random_prompt(14, 6), 3, seed=70) + loners
    compared = run_compared(prompts)
    assert any(step.groups == [(3, 12)] for step in compared)


def test_after_a_preemption():
    prompts = shared(random_prompt(17, 7), 6, seed=80)
    # 12 blocks: the six outgrow them as they decode, and the newest are preempted and recomputed
    compared = run_compared(prompts, num_kvcache_blocks=12, max_model_len=48)
    assert any(step.preemptions_before > 0 for step in compared), "no cascade step after a preemption"


@pytest.mark.parametrize("group_prefixes", [True, False])
def test_greedy_outputs_do_not_depend_on_cascade_or_grouping(group_prefixes):
    rng = np.random.default_rng(0)
    prefixes = [random_prompt(n, 90 + n) for n in (10, 23)]
    # interleaved, so that grouped admission reorders them
    prompts = [prefixes[i % 2] + random_prompt(int(rng.integers(1, 9)), 100 + i) for i in range(8)]
    prompts.append(random_prompt(7, 120))
    outputs = {}
    for mode in ("off", "on"):
        with tiny_llm(
            kvcache_block_size=BLOCK,
            max_model_len=64,
            attention__cascade=mode,
            scheduler__group_prefixes=group_prefixes,
        ) as llm:
            outputs[mode] = llm.generate(prompts, GREEDY, use_tqdm=False)
    reference = outputs["off"]
    assert outputs["on"] == reference
    if group_prefixes:  # and grouping changes nothing either (the other parametrisation ran off/off)
        with tiny_llm(
            kvcache_block_size=BLOCK,
            max_model_len=64,
            attention__cascade="off",
            scheduler__group_prefixes=False,
        ) as llm:
            assert llm.generate(prompts, GREEDY, use_tqdm=False) == reference


def test_prefix_groups_count_full_blocks_before_the_newest_token_only():
    tables = np.array(
        [
            [7, 8, 9, 0],  # 9 tokens: blocks 7, 8 full, the newest token in block 9
            [7, 8, 5, 0],  # 12 tokens: 7, 8 full, the newest in block 5
            [7, 8, 9, 0],  # 8 tokens: only 7 full (block 8 holds the newest); same tables as row 0
            [0, 0, 0, 0],  # padding: no tokens
            [0, 0, 0, 0],  # 5 tokens in block 0 and the next one: block 0 full (zeros pad the table)
            [0, 3, 0, 0],  # 6 tokens: block 0 full
        ]
    )
    seqlens = np.array([9, 12, 8, 0, 5, 6])
    assert sorted(prefix_groups(tables, seqlens, BLOCK)) == [([0, 1, 2], 1), ([4, 5], 1)]
    assert prefix_groups(tables, np.array([9, 12, 0, 0, 1, 1]), BLOCK) == [([0, 1], 2)]


def test_plan_orders_groups_cuts_their_prefixes_into_chunks_and_bounds_their_number(monkeypatch):
    monkeypatch.setattr(cascade, "MAX_CASCADE_GROUPS", 2)
    monkeypatch.setattr(cascade, "PREFIX_CHUNKS_BY_ROWS", ((8, 2),))
    # three groups of two: prefixes of 1, 3 and 2 blocks; the two that save most are served
    tables = np.array([[1, 2, 3, 9], [1, 2, 3, 8], [4, 9, 0, 0], [4, 8, 0, 0], [5, 6, 7, 1], [5, 6, 2, 3]])
    seqlens = np.array([[14, 14, 6, 6, 13, 9], [15, 15, 7, 7, 14, 10]])
    plan = plan_cascade(tables, seqlens, BLOCK, "on")
    # group (0, 1) over 3 blocks in chunks of 1 and 2 blocks, then group (4, 5) over 2 blocks in two of 1
    assert plan.prefix_cu_seqlens_q.tolist() == [0, 2, 4, 6, 8]
    assert plan.prefix_cu_seqlens_k.tolist() == [0, 4, 12, 16, 20]
    assert plan.prefix_query_rows.tolist() == [0, 1, 0, 1, 4, 5, 4, 5, 0, 0, 0, 0]
    assert plan.prefix_block_tables.tolist() == [[1, 2, 3, 9], [2, 3, 9, 0], [5, 6, 7, 1], [6, 7, 1, 0]]
    assert plan.partial_rows.tolist() == [[0, 2], [1, 3], [0, 0], [0, 0], [4, 6], [5, 7]]
    assert plan.has_partial.tolist() == [[True, True]] * 2 + [[False, False]] * 2 + [[True, True]] * 2
    assert plan.prefix_lens.tolist() == [12, 12, 0, 0, 8, 8]
    assert plan.remainder_block_tables.tolist() == [
        [9, 9, 9, 9],
        [8, 8, 8, 8],
        [4, 9, 0, 0],
        [4, 8, 0, 0],
        [7, 1, 1, 1],
        [2, 3, 3, 3],
    ]
    assert plan.saved_kv_tokens == 12 + 8
    # the chunks' blocks (1; 2, 3; 5; 6) numbered for an fp8 cache's scratch copy, in order of their blocks;
    # the entries past each chunk (never read) 0; each scratch block's source, then zeros to the static size
    assert plan.prefix_scratch_tables.tolist() == [[0, 0, 0, 0], [1, 2, 0, 0], [3, 0, 0, 0], [4, 0, 0, 0]]
    padding = [0] * (cascade.prefix_scratch_blocks(4) - 5)
    assert plan.prefix_scratch_sources.tolist() == [1, 2, 3, 5, 6] + padding
    assert plan.prefix_scratch_count.tolist() == [5]


def test_a_prefix_of_fewer_blocks_than_chunks_takes_a_slot_per_block(monkeypatch):
    monkeypatch.setattr(cascade, "PREFIX_CHUNKS_BY_ROWS", ((8, 4),))
    tables = np.array([[1, 2, 5], [1, 2, 6], [1, 2, 7]])
    plan = plan_cascade(tables, np.array([[9, 10, 11]]), BLOCK, "on")
    assert plan.prefix_cu_seqlens_k[:4].tolist() == [0, 4, 8, 8]
    assert plan.prefix_cu_seqlens_q[:4].tolist() == [0, 3, 6, 6]
    assert plan.has_partial.tolist() == [[False, True, False, True]] * 3  # chunks 1 and 3: a block each
    # batches of more rows take their prefixes whole, in plans of as many columns (the rest absent parts)
    monkeypatch.setattr(cascade, "PREFIX_CHUNKS_BY_ROWS", ((2, 4),))
    plan = plan_cascade(tables, np.array([[9, 10, 11]]), BLOCK, "on")
    assert plan.prefix_cu_seqlens_k.tolist()[:2] == [0, 8]
    assert plan.has_partial.tolist() == [[True, False, False, False]] * 3


def test_auto_serves_a_group_where_the_saved_reads_reach_the_threshold():
    threshold = cascade.CASCADE_MIN_SAVED_TOKENS
    assert cascade_pays(threshold, 2, "auto") and not cascade_pays(threshold - 1, 2, "auto")
    assert cascade_pays(threshold // 4, 5, "auto") and not cascade_pays(threshold // 4, 4, "auto")
    assert cascade_pays(1, 2, "on") and not cascade_pays(1, 1, "on")
    assert not cascade_pays(threshold * 10, 100, "off")


def test_merged_partials_are_attention_over_the_union():
    torch.manual_seed(0)
    query, keys, values = torch.randn(3, 2, 8), torch.randn(10, 2, 8), torch.randn(10, 2, 8)

    def attend(k, v):
        scores = torch.einsum("qhd,khd->qhk", query, k)
        return torch.einsum("qhk,khd->qhd", scores.softmax(-1), v), scores.logsumexp(-1)

    whole, _ = attend(keys, values)
    parts = [attend(keys[a:b], values[a:b]) for a, b in ((0, 4), (4, 7), (7, 10))]
    every = torch.ones(3, dtype=torch.bool)
    torch.testing.assert_close(merge_partials([(out, lse, every) for out, lse in parts]), whole)
    # a part a row lacks is ignored whatever it holds (NaN, inf here); a row with no part is zero
    present = torch.tensor([[True, True, True], [False, True, True], [False, False, False]]).t()
    for out, lse in parts:
        out[2], lse[2] = float("nan"), float("inf")
    parts[0][0][1], parts[0][1][1] = float("nan"), float("nan")
    merged = merge_partials([(out, lse, rows) for (out, lse), rows in zip(parts, present)])
    torch.testing.assert_close(merged[0], whole[0])
    torch.testing.assert_close(merged[1], attend(keys[4:], values[4:])[0][1])
    assert merged[2].eq(0).all()


def test_compiled_cascade_matches_eager_without_recompiles():
    """Decode by cascade is a compiled graph of the decoder layer's own, built at start-up: its guards told
    apart from the plain graph's once the runner stops evaluating the rest (see CompiledModel)."""
    prompts = shared(random_prompt(40, 8), 4, seed=130) + [random_prompt(9, 140)]
    settings = dict(kvcache_block_size=16, num_kvcache_blocks=64, max_model_len=128, attention__cascade="on")
    with tiny_llm(**settings) as eager:
        expected = eager.generate(prompts, GREEDY, use_tqdm=False)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    with tiny_llm(**settings, compile__enabled=True) as compiled:
        frames_after_warmup = counters["stats"]["unique_graphs"]
        assert frames_after_warmup == 3  # the decoder layer's, plain and by cascade, and the final norm's
        with cascade_against_plain(compiled) as steps:
            assert compiled.generate(prompts, GREEDY, use_tqdm=False) == expected
        assert steps and max(step.worst for step in steps) <= 1
        assert counters["stats"]["unique_graphs"] == frames_after_warmup, "recompiled after warm-up"
        assert not counters["graph_break"]
