"""The FP8 KV cache on the CPU: the store path rounds to e4m3 (saturating) and the torch backend's ops read
an fp8 cache as the float cache it dequantizes to."""

import pytest
import torch

import nvllm.ops  # noqa: F401
from nvllm.ops.fp8_kv_cache import FP8_KV, dequantized_blocks
from nvllm.ops.torch_attention import store_kvcache
from tests.helpers.triton_interpreter import run_in_interpreter
from tests.ops.test_attention_ops import run_paged_batch

NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, NUM_HEADS = 6, 4, 2, 8, 4
E4M3_RELATIVE_STEP = 2**-4  # 3 mantissa bits: a normal value rounds (to nearest) to within 1/16 of itself
E4M3_SMALLEST_STEP = 2**-9  # the subnormals' spacing


def caches(dtype):
    shape = (NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    return torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)


def test_store_then_read_back_is_the_float_cache_rounded_to_e4m3():
    generator = torch.Generator().manual_seed(0)
    key = 3 * torch.randn(9, NUM_KV_HEADS, HEAD_DIM, generator=generator)
    value = 3 * torch.randn(9, NUM_KV_HEADS, HEAD_DIM, generator=generator)
    key[0, 0, :2], value[1, 1, :2] = torch.tensor([1000.0, -1000.0]), torch.tensor([-500.0, 449.0])
    slots = [0, 5, 6, 23, -1, 11, 2, -1, 17]  # scattered, two padded tokens
    fp8_k, fp8_v = caches(FP8_KV)
    store_kvcache(key, value, fp8_k, fp8_v, torch.tensor(slots))
    for fp8, stored in ((fp8_k, key), (fp8_v, value)):
        exact = torch.zeros(NUM_BLOCKS * BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)  # the float cache, slot by slot
        for token, slot in enumerate(slots):
            if slot >= 0:
                exact[slot] = stored[token].clamp(-448, 448)  # outliers saturate at e4m3's largest value
        read_back = fp8.float().flatten(0, 1)
        assert ((read_back - exact).abs() <= E4M3_RELATIVE_STEP * exact.abs() + E4M3_SMALLEST_STEP).all()
    assert fp8_k.flatten(0, 1)[0, 0, :2].float().tolist() == [448.0, -448.0]
    assert fp8_v.flatten(0, 1)[5, 1, :2].float().tolist() == [-448.0, 448.0]


def random_fp8_caches(seed):
    generator = torch.Generator().manual_seed(seed)
    shape = (NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    return tuple(2 * torch.randn(shape, generator=generator) for _ in range(2)), generator


def test_torch_backend_reads_an_fp8_cache_as_the_float_cache_it_dequantizes_to():
    (k_float, v_float), generator = random_fp8_caches(1)
    k_fp8, v_fp8 = k_float.to(FP8_KV), v_float.to(FP8_KV)
    k_dequantized, v_dequantized = k_fp8.float(), v_fp8.float()
    tables = torch.tensor([[4, 1, 0], [2, 5, 3]], dtype=torch.int32)
    seqlens = torch.tensor([7, 11], dtype=torch.int32)
    scale = HEAD_DIM**-0.5
    prefill_query = torch.randn(5, NUM_HEADS, HEAD_DIM, generator=generator)
    cu_seqlens_q = torch.tensor([0, 2, 5], dtype=torch.int32)
    decode_query = torch.randn(2, NUM_HEADS, HEAD_DIM, generator=generator)

    def ops(k_cache, v_cache):
        attention = torch.ops.nvllm.attention(
            prefill_query, k_cache, v_cache, cu_seqlens_q, seqlens, tables, 3, 11, scale, "torch"
        )
        prefix = torch.ops.nvllm.prefix_attention(
            decode_query, k_cache, v_cache, torch.tensor([0, 2], dtype=torch.int32),
            torch.tensor([0, 6], dtype=torch.int32), tables[:1], 2, 11, scale, "torch",
        )  # fmt: skip
        decode = torch.ops.nvllm.decode_attention_with_lse(
            decode_query, k_cache, v_cache, seqlens, tables, scale, "torch"
        )
        return [attention, *prefix, *decode]

    for fp8, dequantized in zip(ops(k_fp8, v_fp8), ops(k_dequantized, v_dequantized), strict=True):
        torch.testing.assert_close(fp8, dequantized, atol=1e-6, rtol=1e-6)
    for fp8, exact in zip(ops(k_fp8, v_fp8), ops(k_float, v_float), strict=True):
        errors = (fp8 - exact).abs()  # K/V of standard deviation 2, each rounded by up to 1/16 of itself
        assert 0 < errors.max() < 0.25 and errors.mean() < 0.08  # the rounding reached the outputs, no more


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_fp8_paged_attention_is_dense_float_attention_within_e4m3_rounding(block_size):
    cases = [(0, 7), (5, 3), (13, 1), (0, 1), (32, 9), (16, 16)]  # prefill, chunk after a prefix, decodes
    out, reference = run_paged_batch(cases, block_size, cache_dtype=FP8_KV)
    errors = (out - reference).abs()
    assert errors.max() < 0.15 and errors.mean() < 0.02  # unit-variance K/V: e4m3 steps of up to 1/16


def test_dequantized_blocks_are_a_scratch_cache_the_renumbered_tables_address():
    (k_float, v_float), _ = random_fp8_caches(2)
    k_fp8, v_fp8 = k_float.to(FP8_KV), v_float.to(FP8_KV)
    tables = torch.tensor([[4, 1, 0], [2, 5, 3]], dtype=torch.int32)
    k_scratch, v_scratch, scratch_tables = dequantized_blocks(k_fp8, v_fp8, tables, 2, torch.bfloat16)
    assert k_scratch.dtype == torch.bfloat16 and scratch_tables.shape == (2, 2)
    for row in range(2):
        for column in range(2):
            block, scratch_block = tables[row, column], scratch_tables[row, column]
            assert torch.equal(k_scratch[scratch_block].float(), k_fp8[block].float())
            assert torch.equal(v_scratch[scratch_block].float(), v_fp8[block].float())


def test_a_block_several_rows_name_is_dequantized_once():
    """A shared prefix's blocks (4 and 1) and a table's padding (0) take one scratch block each, which every
    row naming them addresses; five distinct blocks, five scratch blocks written."""
    (k_float, v_float), _ = random_fp8_caches(3)
    k_fp8, v_fp8 = k_float.to(FP8_KV), v_float.to(FP8_KV)
    tables = torch.tensor([[4, 1, 0, 3], [4, 1, 5, 3], [4, 2, 0, 0]], dtype=torch.int32)
    k_scratch, v_scratch, scratch_tables = dequantized_blocks(k_fp8, v_fp8, tables, 3, torch.bfloat16)
    assert scratch_tables.tolist() == [[3, 1, 0], [3, 1, 4], [3, 2, 0]]  # blocks 0, 1, 2, 4, 5 in order
    for block, scratch_block in zip(tables[:, :3].flatten().tolist(), scratch_tables.flatten().tolist()):
        assert torch.equal(k_scratch[scratch_block].float(), k_fp8[block].float())
        assert torch.equal(v_scratch[scratch_block].float(), v_fp8[block].float())


def test_a_scratch_copy_past_its_size_limit_holds_the_distinct_blocks_alone(monkeypatch):
    """Room for every entry (12 blocks) below the limit; above it, the six distinct blocks, addressed as
    before."""
    from nvllm.ops import fp8_kv_cache

    (k_float, v_float), _ = random_fp8_caches(3)
    k_fp8, v_fp8 = k_float.to(FP8_KV), v_float.to(FP8_KV)
    tables = torch.tensor([[4, 1, 0, 3], [4, 1, 5, 3], [4, 2, 0, 0]], dtype=torch.int32)
    k_scratch, _, roomy_tables = dequantized_blocks(k_fp8, v_fp8, tables, 4, torch.bfloat16)
    assert k_scratch.shape[0] == 12
    block_bytes = 2 * k_fp8[0].numel() * 2
    monkeypatch.setattr(fp8_kv_cache, "EXACT_SCRATCH_ABOVE_BYTES", 12 * block_bytes - 1)
    k_scratch, v_scratch, scratch_tables = dequantized_blocks(k_fp8, v_fp8, tables, 4, torch.bfloat16)
    assert k_scratch.shape[0] == v_scratch.shape[0] == 6  # blocks 0, 1, 2, 3, 4, 5
    assert torch.equal(scratch_tables, roomy_tables)
    for block, scratch_block in zip(tables.flatten().tolist(), scratch_tables.flatten().tolist()):
        assert torch.equal(k_scratch[scratch_block].float(), k_fp8[block].float())
        assert torch.equal(v_scratch[scratch_block].float(), v_fp8[block].float())


def test_a_cascade_plans_numbering_makes_a_scratch_cache_of_its_prefix_blocks():
    """Numbered once a round by the plan (`CascadePlan.prefix_scratch_tables`), the prefix pass's scratch
    cache holds every block a chunk reads, at the entry's scratch block, in as many blocks as
    `prefix_scratch_blocks` allows for any plan of that width."""
    import numpy as np

    from nvllm.attention.cascade import plan_cascade, prefix_scratch_blocks
    from nvllm.ops.fp8_kv_cache import numbered_scratch

    (k_float, v_float), _ = random_fp8_caches(4)
    k_fp8, v_fp8 = k_float.to(FP8_KV), v_float.to(FP8_KV)
    # two groups: rows 0-2 share blocks 1, 2 (row 2's newest token in block 4), rows 3-4 share block 5
    tables = np.array([[1, 2, 3], [1, 2, 0], [1, 2, 4], [5, 3, 0], [5, 4, 0]])
    plan = plan_cascade(tables, np.array([[10, 9, 12, 6, 7]]), BLOCK_SIZE, "on")
    width = tables.shape[1]
    k_scratch, v_scratch = numbered_scratch(
        k_fp8, v_fp8, plan.prefix_scratch_sources, plan.prefix_scratch_count, torch.float32
    )
    assert k_scratch.shape[0] == prefix_scratch_blocks(width)
    read = 0
    for slot, blocks in enumerate(plan.prefix_cu_seqlens_k.diff().div(BLOCK_SIZE).int().tolist()):
        for column in range(blocks):
            block, scratch_block = (
                plan.prefix_block_tables[slot, column],
                plan.prefix_scratch_tables[slot, column],
            )
            assert torch.equal(k_scratch[scratch_block], k_fp8[block].float())
            assert torch.equal(v_scratch[scratch_block], v_fp8[block].float())
            read += 1
    assert read == 3  # blocks 1 and 2 of the first group, 5 of the second


def test_the_flash_backends_prefix_pass_reads_an_fp8_cache_through_the_plans_scratch_copy(monkeypatch):
    """The CUDA backend's cascade prefix pass on the CPU, flash-attn replaced by the torch backend's pass
    (which checks that it is handed a scratch cache in the queries' dtype): with the plan's numbering and
    without it, the torch backend's result over the fp8 cache as it is."""
    import importlib.util
    import sys
    import types

    import numpy as np

    from nvllm.attention.cascade import plan_cascade
    from nvllm.ops import torch_attention
    from nvllm.ops.paged_batch import PrefixBatch

    def varlen_attention(query, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal, block_table, **_):
        assert k.dtype == v.dtype == query.dtype and not causal
        batch = PrefixBatch(cu_q, cu_k, block_table, max_q, max_k, None, None, None)
        return (*torch_attention.prefix_attention(query, k, v, batch, softmax_scale), None)

    monkeypatch.setitem(
        sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_varlen_func=varlen_attention)
    )
    # a copy of the module of its own, bound to the stand-in: neither `sys.modules` nor the `nvllm.ops`
    # package (whose attribute `from nvllm.ops import flash_attention` reads) is left holding it
    spec = importlib.util.find_spec("nvllm.ops.flash_attention")
    flash_attention = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flash_attention)
    (k_float, v_float), _ = random_fp8_caches(5)
    k_fp8, v_fp8 = k_float.to(FP8_KV), v_float.to(FP8_KV)
    tables = np.array([[1, 2, 3], [1, 2, 0], [1, 2, 4], [5, 3, 0], [5, 4, 0]])
    plan = plan_cascade(tables, np.array([[10, 9, 12, 6, 7]]), BLOCK_SIZE, "on")
    query = torch.randn(plan.prefix_query_rows.numel(), NUM_HEADS, HEAD_DIM)
    passes = (plan.prefix_cu_seqlens_q, plan.prefix_cu_seqlens_k, plan.prefix_block_tables, 3, 12)
    expected_out, expected_lse = torch_attention.prefix_attention(
        query, k_fp8, v_fp8, PrefixBatch(*passes, None, None, None), 0.3
    )
    rows = int(plan.prefix_cu_seqlens_q[-1])
    numbered = (plan.prefix_scratch_tables, plan.prefix_scratch_sources, plan.prefix_scratch_count)
    for numbering in (numbered, (None, None, None)):
        out, lse = flash_attention.prefix_attention(
            query, k_fp8, v_fp8, PrefixBatch(*passes, *numbering), 0.3
        )
        torch.testing.assert_close(out[:rows], expected_out[:rows])
        torch.testing.assert_close(lse[:, :rows], expected_lse[:, :rows])


def test_the_triton_dequantization_writes_each_distinct_block_as_the_reference_in_the_interpreter():
    """`dequantize_blocks` (what CUDA runs), its programs sharing out the chunks of the distinct blocks,
    fills the scratch blocks the torch reference fills, and no other: the blocks past the count are left as
    they were."""
    run_in_interpreter(
        """
import torch
from nvllm.ops import dequantize_blocks_triton
from nvllm.ops.dequantize_blocks_triton import dequantize_blocks
from nvllm.ops.fp8_kv_cache import FP8_KV, dequantized_blocks, first_uses, scratch_sources

generator = torch.Generator().manual_seed(0)
# blocks of 1,024 elements in chunks of 256: 4 chunks a block, shared out over the interpreter's 3 programs
dequantize_blocks_triton.CHUNK = 256
k_cache, v_cache = (torch.randn(6, 16, 2, 32, generator=generator).to(FP8_KV) for _ in range(2))
tables = torch.tensor([[4, 1, 0, 3], [4, 1, 5, 3], [4, 2, 0, 0]], dtype=torch.int32)
k_expected, v_expected, expected_tables = dequantized_blocks(k_cache, v_cache, tables, 3, torch.bfloat16)
flat = tables[:, :3].flatten()
scratch_blocks, first = first_uses(flat)
assert scratch_blocks.view(3, 3).tolist() == expected_tables.tolist()
sources, count = scratch_sources(flat, scratch_blocks, first, 9)
assert sources[:5].tolist() == [0, 1, 2, 4, 5] and count.tolist() == [5]
k_scratch = torch.full((9, 16, 2, 32), float("nan"), dtype=torch.bfloat16)
v_scratch = torch.full_like(k_scratch, float("nan"))
dequantize_blocks(k_cache, v_cache, k_scratch, v_scratch, sources, count)
assert torch.equal(k_scratch[:5], k_expected[:5]) and torch.equal(v_scratch[:5], v_expected[:5])
assert k_scratch[5:].isnan().all() and v_scratch[5:].isnan().all()
untouched = torch.full_like(k_scratch, float("nan"))
dequantize_blocks(k_cache, v_cache, untouched, untouched.clone(), sources, count * 0)
assert untouched.isnan().all()  # a count of none writes nothing
"""
    )


def test_the_triton_decode_kernel_reads_an_fp8_cache_as_the_torch_reference_in_the_interpreter():
    """The kernel over an fp8 cache (its dots in fp16) at lengths on the 64-token tile's edges, whole and in
    KV splits, its programs started heads first and rows first, its elements read in pairs and its value
    words staged; the GPU test does the same at the real shapes."""
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp8_kv_cache import FP8_KV
from nvllm.ops import paged_decode_attention as decode_module
from nvllm.ops.paged_decode_attention import paged_decode_attention
from nvllm.ops.torch_attention import decode_attention_with_lse

generator = torch.Generator().manual_seed(0)
lengths = [1, 63, 64, 65, 300, 0]
rows, width = len(lengths), 3
shape = (rows * width, 128, 2, 32)
k_cache, v_cache = [(2 * torch.randn(shape, generator=generator)).to(FP8_KV) for _ in range(2)]
tables = torch.randperm(rows * width, generator=generator).view(rows, width).int()
seqlens = torch.tensor(lengths, dtype=torch.int32)
query = torch.randn(rows, 4, 32, generator=generator).to(torch.bfloat16)
scale = 32**-0.5
expected_out, expected_lse = decode_attention_with_lse(query.float(), k_cache, v_cache, seqlens, tables,
                                                       scale)
for splits, heads_first, pairs in [(1, True, True), (4, True, True), (1, False, False), (4, False, False)]:
    decode_module.HEADS_FIRST = heads_first
    decode_module.FP8_ELEMENT_PAIRS = pairs
    budget = 128 if pairs else None  # a register budget, a launch option the interpreter takes too
    out, lse = paged_decode_attention(query, k_cache, v_cache, seqlens, tables, scale, splits, 64,
                                      max_registers=budget)
    torch.testing.assert_close(out.float(), expected_out, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, expected_lse, atol=1e-3, rtol=1e-4)
"""
    )


def test_the_decode_grid_starts_heads_first_unless_the_rows_pass_the_grids_second_axis(monkeypatch):
    pytest.importorskip("triton")
    from nvllm.ops import paged_decode_attention as decode_module
    from nvllm.ops.paged_decode_attention import MAX_GRID_Y, decode_grid

    assert decode_grid(256, 8, 2) == ((8, 256, 2), True)
    assert decode_grid(MAX_GRID_Y, 8, 1) == ((8, MAX_GRID_Y, 1), True)
    assert decode_grid(MAX_GRID_Y + 1, 8, 1) == ((MAX_GRID_Y + 1, 8, 1), False)  # CUDA would refuse it
    monkeypatch.setattr(decode_module, "HEADS_FIRST", False)
    assert decode_grid(256, 8, 2) == ((256, 8, 2), False)
