"""Decode attention's KV splits combined by each (row, KV head)'s last split to finish
(`paged_decode_attention.LAST_SPLIT_COMBINES`), against the same splits combined by the second kernel: the
same results eagerly, and in a CUDA graph replayed many times under programmatic dependent launch, where a
split counter left unreset or a partial read before its store would show. The interpreter test
(`tests/ops/test_fp8_kv_cache.py`) runs the programs one after another and cannot race."""

import pytest
import torch

from nvllm.ops import paged_decode_attention as decode_module
from nvllm.ops.paged_decode_attention import arrival_counters, paged_decode_attention

pytestmark = pytest.mark.gpu

BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM = 256, 8, 128
LENGTHS = [0, 1, 129, 256, 257, 1000, 2049, 4096]


def decode_batch(num_heads: int, cache_dtype: torch.dtype, generator: torch.Generator):
    rows, width = len(LENGTHS), 16
    shape = (rows * width, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    k_cache, v_cache = [torch.randn(shape, generator=generator).to("cuda", cache_dtype) for _ in range(2)]
    tables = torch.randperm(rows * width, generator=generator).view(rows, width).int().cuda()
    seqlens = torch.tensor(LENGTHS, dtype=torch.int32, device="cuda")
    query = torch.randn(rows, num_heads, HEAD_DIM, generator=generator).to("cuda", torch.bfloat16)
    return query, k_cache, v_cache, seqlens, tables


def attend(batch, num_splits: int, last_split_combines: bool, monkeypatch) -> tuple[torch.Tensor, ...]:
    monkeypatch.setattr(decode_module, "LAST_SPLIT_COMBINES", last_split_combines)
    return paged_decode_attention(*batch, HEAD_DIM**-0.5, num_splits)


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("num_heads", [16, 32])
@pytest.mark.parametrize("num_splits", [2, 8, 32])
def test_the_last_split_combines_as_the_combine_kernel_does(num_splits, num_heads, cache_dtype, monkeypatch):
    batch = decode_batch(num_heads, cache_dtype, torch.Generator().manual_seed(num_splits))
    out, lse = attend(batch, num_splits, True, monkeypatch)
    expected_out, expected_lse = attend(batch, num_splits, False, monkeypatch)
    # the two sum the same fp32 partials in another order: at most a rounding of the bf16 output apart
    torch.testing.assert_close(out.float(), expected_out.float(), atol=1e-3, rtol=8e-3)
    torch.testing.assert_close(lse, expected_lse, atol=1e-5, rtol=1e-6)
    assert not out[0].any() and torch.isneginf(lse[0]).all()  # the row with no KV
    assert not arrival_counters(out.device, 1).any()


def test_the_last_split_combines_in_a_cuda_graph_replayed_under_dependent_launch(monkeypatch):
    """Replays with a new query each: every replay's output is the combine kernel's for its query, so each
    launch found its counters at zero and read every split's stored partial."""
    generator = torch.Generator().manual_seed(0)
    query, *rest = decode_batch(32, torch.bfloat16, generator)
    static_query = query.clone()
    queries = [torch.randn(query.shape, generator=generator).to("cuda", query.dtype) for _ in range(8)]
    expected = [attend((q, *rest), 16, False, monkeypatch) for q in queries]
    attend((static_query, *rest), 16, True, monkeypatch)  # compiles the kernel outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = paged_decode_attention(static_query, *rest, HEAD_DIM**-0.5, 16)
    for _ in range(25):
        for q, (expected_out, expected_lse) in zip(queries, expected, strict=True):
            static_query.copy_(q)
            graph.replay()
            torch.testing.assert_close(out.float(), expected_out.float(), atol=1e-3, rtol=8e-3)
            torch.testing.assert_close(lse, expected_lse, atol=1e-5, rtol=1e-6)
    assert not arrival_counters(out.device, 1).any()
