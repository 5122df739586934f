"""Cascade attention on the GPU: the CUDA backend's two passes (flash-attn's, and nvllm's Triton decode kernel
for the remainders of large batches) merged against flash-attn's plain decode (bf16), the Triton kernel
against flash-attn, and an engine serving a shared-prefix workload by cascade inside its compiled model and
CUDA graphs."""

import dataclasses

import numpy as np
import pytest
import torch
import torch._dynamo.utils

import nvllm.ops  # noqa: F401
from nvllm import LLM, SamplingParams
from nvllm.attention import AttentionMetadata
from nvllm.attention.cascade import plan_cascade
from nvllm.layers.cascade_attention import cascade_attention
from tests.api.test_generate_gpu import (  # noqa: F401  (fixtures)
    EQUIVALENT_BF16_LOGITS,
    assert_greedy_path,
    checkpoint_06b,
    hf_fp32,
)

pytestmark = pytest.mark.gpu

BLOCK = 256
HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128


def mixed_batch() -> tuple[np.ndarray, np.ndarray]:
    """Block tables and lengths of a decode batch: a group of three over 3 blocks, a group of two over one
    block (one of them ends inside its next), a row that shares nothing, a row shorter than a block and a
    padded row."""
    tables = np.zeros((8, 8), dtype=np.int32)
    tables[[0, 2, 5], :3] = [1, 2, 3]
    tables[0, 3:5], tables[2, 3], tables[5, 3:6] = [10, 11], 12, [13, 14, 15]
    tables[[1, 4], 0] = 7
    tables[1, 1:3], tables[4, 1] = [20, 21], 22
    tables[3, :4] = [30, 31, 32, 33]
    tables[6, 0] = 40
    seqlens = np.array(
        [3 * BLOCK + 300, 2 * BLOCK + 17, 3 * BLOCK + 1, 3 * BLOCK + 200, BLOCK + 256, 5 * BLOCK + 99, 90, 0]
    )
    return tables, seqlens


# one mixed batch, and nine side by side with blocks of their own: more groups than a plan serves, and
# remainder passes of 8 KV splits (8 rows) and of one (72 rows)
@pytest.mark.parametrize("copies", [1, 9])
def test_flash_cascade_matches_flash_plain_on_mixed_batches(copies):
    torch.manual_seed(0)
    one_tables, one_seqlens = mixed_batch()
    blocks_per_copy = 48
    tables = np.concatenate([one_tables + blocks_per_copy * copy for copy in range(copies)])
    seqlens = np.tile(one_seqlens, copies)
    rows = len(seqlens)
    plan = plan_cascade(tables, seqlens[None], BLOCK, "on")
    assert plan is not None
    if copies == 1:
        assert plan.prefix_lens.tolist() == [3 * BLOCK, BLOCK, 3 * BLOCK, 0, BLOCK, 3 * BLOCK, 0, 0]
    k_cache = torch.randn(
        blocks_per_copy * copies, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16
    )
    v_cache = torch.randn_like(k_cache)
    query = torch.randn(rows, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    meta = AttentionMetadata(
        slot_mapping=torch.full((rows,), -1, device="cuda"),
        cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32, device="cuda"),
        seqlens_k=torch.from_numpy(seqlens.astype(np.int32)).cuda(),
        block_tables=torch.from_numpy(tables).cuda(),
        max_seqlen_q=2,
        max_seqlen_k=8 * BLOCK,
        cascade=plan.to("cuda"),
    )
    scale = HEAD_DIM**-0.5
    plain_args = (
        meta.cu_seqlens_q,
        meta.seqlens_k,
        meta.block_tables,
        2,
        8 * BLOCK,
        scale,
    )
    for backend in ("flash_attn", "torch"):
        plain = torch.ops.nvllm.attention(query, k_cache, v_cache, *plain_args, backend).float()
        by_cascade = cascade_attention(query, k_cache, v_cache, meta, scale, backend).float()
        # bf16 outputs (|x| < ~1 here): the merge rounds the two partial outputs once more
        torch.testing.assert_close(by_cascade, plain, atol=2e-2, rtol=2e-2)
        assert by_cascade[7::8].eq(0).all()  # the padded rows
    compiled = torch.compile(cascade_attention, fullgraph=True)
    torch.testing.assert_close(
        compiled(query, k_cache, v_cache, meta, scale, "flash_attn").float(), plain, atol=2e-2, rtol=2e-2
    )


@pytest.mark.parametrize("num_stages", [2, 3])  # 3: the next tile's loads in flight during a tile's dots
@pytest.mark.parametrize("block_n", [64, 128])  # the kernel's two tiles (`tile_tokens`)
@pytest.mark.parametrize("num_splits", [1, 2, 16])  # 16: more splits than a short row has 64-token tiles
@pytest.mark.parametrize("heads", [HEADS, 4 * KV_HEADS])  # Qwen3-0.6B's groups of 2 queries, Qwen3-8B's of 4
def test_triton_decode_kernel_matches_flash_attn(heads, num_splits, block_n, num_stages):
    from flash_attn import flash_attn_with_kvcache

    from nvllm.ops.paged_decode_attention import paged_decode_attention

    torch.manual_seed(0)
    rows, width = 72, 5
    # no KV, within one tile, across tile and block edges, over several blocks
    lengths = [0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, width * BLOCK]
    seqlens = torch.tensor(lengths + torch.randint(1, width * BLOCK, (rows - len(lengths),)).tolist())
    seqlens = seqlens.to(torch.int32).cuda()
    tables = torch.randperm(rows * width).view(rows, width).to(torch.int32).cuda()
    k_cache = torch.randn(rows * width, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    # the query as the model hands it over: heads split off a wider row
    query = torch.randn(rows, heads + 2 * KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)[:, :heads]
    scale = HEAD_DIM**-0.5
    out, lse = paged_decode_attention(
        query, k_cache, v_cache, seqlens, tables, scale, num_splits, block_n, num_stages=num_stages
    )
    expected_out, expected_lse = flash_attn_with_kvcache(
        query[:, None],
        k_cache,
        v_cache,
        cache_seqlens=seqlens,
        block_table=tables,
        softmax_scale=scale,
        causal=True,
        return_softmax_lse=True,
    )
    attended = seqlens > 0
    torch.testing.assert_close(out[attended], expected_out[attended, 0], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse[attended], expected_lse[attended, :, 0], atol=1e-4, rtol=1e-4)
    assert out[0].eq(0).all() and lse[0].eq(float("-inf")).all()


def shared_prefix_prompts() -> list[list[int]]:
    # four full blocks shared by 72 requests: batches of more rows than flash-attn serves the remainders of
    prefix = list(range(3000, 4100))
    shared = [prefix + list(range(7000 + 50 * i, 7000 + 50 * i + 5 + i % 40)) for i in range(72)]
    others = [list(range(9000 + 300 * i, 9000 + 300 * i + 40 + 37 * i)) for i in range(8)]
    return [prompt for pair in zip(shared[:8], others) for prompt in pair] + shared[8:]


def test_shared_prefix_workload_by_cascade_in_cuda_graphs(checkpoint_06b, hf_fp32):  # noqa: F811
    prompts, greedy = shared_prefix_prompts(), SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    settings = dict(max_num_seqs=96, max_model_len=2048, gpu_memory_utilization=0.4)
    with LLM(str(checkpoint_06b), attention__cascade="off", **settings) as plain_llm:
        plain = [o["token_ids"] for o in plain_llm.generate(prompts, greedy, use_tqdm=False)]
    counters = torch._dynamo.utils.counters
    with LLM(str(checkpoint_06b), attention__cascade="on", **settings) as llm:
        runner, graphs = llm.model_runner, llm.model_runner.graph_runner
        frames = counters["stats"]["unique_graphs"]
        forward, compared, unreplayed = runner.forward, [], []

        def both(inputs):
            if not inputs.is_prefill and not graphs.can_replay(inputs):
                unreplayed.append(inputs.num_seqs)
            if inputs.cascade is None:
                return forward(inputs)
            reference = forward(dataclasses.replace(inputs, cascade=None)).float().clone()
            logits = forward(inputs)
            error = (logits.float() - reference).norm(dim=-1) / reference.norm(dim=-1)
            compared.append(error.max().item())
            return logits

        runner.forward = both
        try:
            outputs = [o["token_ids"] for o in llm.generate(prompts, greedy, use_tqdm=False)]
        finally:
            del runner.forward
        assert counters["stats"]["unique_graphs"] == frames, "recompiled after warm-up"
        assert not counters["graph_break"], dict(counters["graph_break"])
        assert not unreplayed, f"decode steps outside the CUDA graphs: {unreplayed}"
        replayed = {key for key in graphs.graphs if key[0] == "cascade"}
        assert replayed, "no cascade graphs recorded"
    assert compared, "no decode step was served by cascade"
    # two computations of the same attention in bf16, as compiled against eager in test_gpu
    assert max(compared) < EQUIVALENT_BF16_LOGITS, (
        f"cascade logits {max(compared):.3f} (relative L2) from plain"
    )
    # bf16 parts greedy paths at near ties (this random model's next-token distribution is nearly flat), so
    # the runs are held to the fp32 model's greedy path, not to each other; their first tokens come from the
    # same prefill step, which cascade does not touch
    for prompt, ours, theirs in zip(prompts, outputs, plain):
        assert_greedy_path(hf_fp32, prompt, ours)
        assert_greedy_path(hf_fp32, prompt, theirs)
        assert ours[0] == theirs[0]
