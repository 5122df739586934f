"""The FP8 KV cache's CUDA kernels against the torch reference on the same fp8 cache: the Triton decode
kernel (fp8 loaded and converted in registers) at lengths on the tile edges over several blocks and KV
splits, the fused norm + RoPE + store kernel (quantizing in registers), flash-attn's prefill over cached
prefixes and cascade's prefix pass (both through dequantized blocks), and the dequantization itself."""

import pytest
import torch

import nvllm.ops  # noqa: F401
from nvllm.ops.fp8_kv_cache import FP8_KV
from tests.ops.test_attention_ops import run_paged_batch
from tests.ops.test_qk_norm_rope_store import Case, assert_only_slots_written

pytestmark = pytest.mark.gpu

BLOCK_SIZE, NUM_KV_HEADS, NUM_HEADS, HEAD_DIM = 256, 8, 32, 128
TILE_EDGE_LENGTHS = [1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 2049]


def fp8_caches(num_blocks, generator):
    shape = (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    return [(2 * torch.randn(shape, generator=generator)).to(FP8_KV).cuda() for _ in range(2)]


# the elements read in pairs (also with a register budget that spills a few), or the value words staged
@pytest.mark.parametrize("pairs, max_registers", [(True, None), (True, 128), (False, None)])
@pytest.mark.parametrize("num_stages", [2, 3])  # 3: the next tile's loads in flight during a tile's dots
@pytest.mark.parametrize("num_splits", [1, 4, 32])
@pytest.mark.parametrize("block_n", [64, 128])
def test_triton_decode_kernel_reads_fp8_as_the_torch_reference_does(
    num_splits, block_n, num_stages, pairs, max_registers, monkeypatch
):
    from nvllm.ops import paged_decode_attention as decode_module
    from nvllm.ops.paged_decode_attention import paged_decode_attention
    from nvllm.ops.torch_attention import decode_attention_with_lse

    monkeypatch.setattr(decode_module, "FP8_ELEMENT_PAIRS", pairs)

    generator = torch.Generator().manual_seed(num_splits)
    rows, width = len(TILE_EDGE_LENGTHS), 9
    k_cache, v_cache = fp8_caches(rows * width, generator)
    tables = torch.randperm(rows * width, generator=generator).view(rows, width).int().cuda()
    seqlens = torch.tensor(TILE_EDGE_LENGTHS, dtype=torch.int32, device="cuda")
    query = torch.randn(rows, NUM_HEADS, HEAD_DIM, generator=generator).to("cuda", torch.bfloat16)
    scale = HEAD_DIM**-0.5
    out, lse = paged_decode_attention(
        query,
        k_cache,
        v_cache,
        seqlens,
        tables,
        scale,
        num_splits,
        block_n,
        num_stages=num_stages,
        max_registers=max_registers,
    )
    expected_out, expected_lse = decode_attention_with_lse(query, k_cache, v_cache, seqlens, tables, scale)
    torch.testing.assert_close(out.float(), expected_out.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, expected_lse, atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("num_tokens", [1, 5, 300])
def test_fused_store_kernel_quantizes_as_the_torch_op_does(num_tokens):
    generator = torch.Generator().manual_seed(num_tokens)
    num_blocks = 4
    slots = torch.randperm(num_blocks * BLOCK_SIZE, generator=generator)[:num_tokens]
    slots[torch.rand(num_tokens, generator=generator) < 0.2] = -1
    positions = torch.randint(0, 64, (num_tokens,), generator=generator)
    case = Case(
        16, NUM_KV_HEADS, HEAD_DIM, slots.tolist(), positions.tolist(), torch.bfloat16, device="cuda",
        num_blocks=num_blocks, block_size=BLOCK_SIZE, seed=num_tokens,
    )  # fmt: skip
    case.qkv[:, -HEAD_DIM:] *= 300  # values of the last KV head past e4m3's range: saturated, not NaN
    case.k_cache, case.v_cache = case.k_cache.to(FP8_KV), case.v_cache.to(FP8_KV)
    _, k_cache, v_cache = case.run("flash_attn")
    _, expected_k_cache, expected_v_cache = case.run("torch")
    for cache, expected in ((k_cache, expected_k_cache), (v_cache, expected_v_cache)):
        actual, expected = cache.float(), expected.float()
        assert not actual.isnan().any()
        # both round the same fp32 values to nearest; the norm's last bits may move a rare one a step
        steps_apart = (actual - expected).abs() > 2**-3 * expected.abs() + 2**-9
        assert not steps_apart.any() and (actual != expected).float().mean() < 1e-2
    for cache, original in ((k_cache, case.k_cache), (v_cache, case.v_cache)):
        assert_only_slots_written(cache.view(torch.uint8), original.view(torch.uint8), case.slot_mapping)


@pytest.mark.parametrize(
    "cases",
    [
        [(0, 300), (256, 40), (700, 1), (5, 1), (0, 1), (512, 512)],  # prefill over cached prefixes
        [(c, 1) for c in (1, 255, 256, 257, 1000)],  # decode: the Triton kernel in KV splits
    ],
)
def test_flash_attn_backend_on_an_fp8_cache_matches_the_torch_backend(cases):
    pytest.importorskip("flash_attn")
    settings = dict(device="cuda", dtype=torch.bfloat16, head_dim=HEAD_DIM, cache_dtype=FP8_KV)
    paged, _ = run_paged_batch(cases, BLOCK_SIZE, backend="flash_attn", **settings)
    reference, _ = run_paged_batch(cases, BLOCK_SIZE, backend="torch", **settings)
    torch.testing.assert_close(paged.float(), reference.float(), atol=2e-2, rtol=2e-2)


def test_cascade_prefix_pass_on_an_fp8_cache_matches_the_torch_backend():
    pytest.importorskip("flash_attn")
    generator = torch.Generator().manual_seed(7)
    k_cache, v_cache = fp8_caches(12, generator)
    tables = torch.tensor([[3, 7, 1, 0], [5, 2, 0, 0]], dtype=torch.int32, device="cuda")
    cu_seqlens_q = torch.tensor([0, 3, 5], dtype=torch.int32, device="cuda")
    cu_seqlens_k = torch.tensor([0, 700, 957], dtype=torch.int32, device="cuda")  # prefixes of 700 and 257
    query = torch.randn(5, NUM_HEADS, HEAD_DIM, generator=generator).to("cuda", torch.bfloat16)
    args = (query, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, tables, 3, 4 * BLOCK_SIZE, HEAD_DIM**-0.5)
    out, lse = torch.ops.nvllm.prefix_attention(*args, "flash_attn")
    expected_out, expected_lse = torch.ops.nvllm.prefix_attention(*args, "torch")
    torch.testing.assert_close(out.float(), expected_out.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, expected_lse, atol=1e-2, rtol=1e-3)


def test_shared_blocks_are_dequantized_once_in_a_cuda_graph_as_on_the_cpu():
    """The Triton dequantization of the blocks that rows share (`dequantized_blocks` on CUDA), captured in a
    CUDA graph as a prefill graph holds it, against the torch reference on the CPU: the same renumbered
    tables, the same distinct scratch blocks."""
    from nvllm.ops.fp8_kv_cache import dequantized_blocks

    k_cache, v_cache = fp8_caches(8, torch.Generator().manual_seed(11))
    tables = torch.tensor([[4, 1, 0, 3], [4, 1, 5, 3], [4, 2, 0, 0]], dtype=torch.int32)
    k_expected, v_expected, expected_tables = dequantized_blocks(
        k_cache.cpu(), v_cache.cpu(), tables, 3, torch.bfloat16
    )
    device_tables = tables.cuda()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # compiled and warmed up outside the capture
        dequantized_blocks(k_cache, v_cache, device_tables, 3, torch.bfloat16)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        k_scratch, v_scratch, scratch_tables = dequantized_blocks(
            k_cache, v_cache, device_tables, 3, torch.bfloat16
        )
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(scratch_tables.cpu(), expected_tables)
    assert torch.equal(k_scratch[:5].cpu(), k_expected[:5]) and torch.equal(
        v_scratch[:5].cpu(), v_expected[:5]
    )
