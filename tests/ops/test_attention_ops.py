"""The paged-attention custom ops against dense attention written out by hand."""

import pytest
import torch

import nvllm.ops  # noqa: F401
from nvllm.ops.torch_attention import store_kvcache

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 4, 2, 16


def dense_causal_attention(query, key, value, scale):
    """query [q, H, D] are the last q of the k positions of key/value [k, Hkv, D]."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query, key) * scale
    len_q, len_k = query.shape[0], key.shape[0]
    positions_k = torch.arange(len_k, device=query.device)
    visible = positions_k[None, :] <= positions_k[len_k - len_q :, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), value)


def run_paged_batch(
    cases,
    block_size,
    backend="torch",
    device="cpu",
    dtype=torch.float32,
    seed=0,
    head_dim=HEAD_DIM,
    cache_dtype=None,
):
    """cases: (num_cached, num_new) per sequence. Writes the cached part in one call, the new part in the
    batched call, like the engine, into caches of `cache_dtype` (None: `dtype`); returns (paged output,
    dense reference)."""
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)

    num_blocks = sum(-(-(c + n) // block_size) for c, n in cases) + 3
    cache_shape = (num_blocks, block_size, NUM_KV_HEADS, head_dim)
    k_cache = torch.zeros(cache_shape, device=device, dtype=cache_dtype or dtype)
    v_cache = torch.zeros_like(k_cache)
    free_blocks = torch.randperm(num_blocks, generator=generator).tolist()  # scattered, not contiguous
    queries, slots, cu_seqlens, seqlens_k, tables, references = [], [], [0], [], [], []
    width = max(-(-(c + n) // block_size) for c, n in cases)
    scale = head_dim**-0.5
    for num_cached, num_new in cases:
        total = num_cached + num_new
        table = [free_blocks.pop() for _ in range(-(-total // block_size))]
        seq_slots = torch.tensor([table[p // block_size] * block_size + p % block_size for p in range(total)])
        key, value = randn(total, NUM_KV_HEADS, head_dim), randn(total, NUM_KV_HEADS, head_dim)
        query = randn(num_new, NUM_HEADS, head_dim)
        cached = seq_slots[:num_cached].to(device)
        store_kvcache(key[:num_cached], value[:num_cached], k_cache, v_cache, cached)
        queries.append(query)
        slots.append(seq_slots[num_cached:])
        new_kv = (key[num_cached:], value[num_cached:])
        references.append((query, key, value, new_kv))
        cu_seqlens.append(cu_seqlens[-1] + num_new)
        seqlens_k.append(total)
        tables.append(table + [0] * (width - len(table)))
    key_new = torch.cat([r[3][0] for r in references])
    value_new = torch.cat([r[3][1] for r in references])
    slot_mapping = torch.cat(slots + [torch.tensor([-1, -1])]).to(device)  # two padded tokens write nothing
    pad = torch.zeros(2, NUM_KV_HEADS, head_dim, device=device, dtype=dtype)
    store_kvcache(torch.cat([key_new, pad]), torch.cat([value_new, pad]), k_cache, v_cache, slot_mapping)
    out = torch.ops.nvllm.attention(
        torch.cat(queries),
        k_cache,
        v_cache,
        torch.tensor(cu_seqlens, dtype=torch.int32, device=device),
        torch.tensor(seqlens_k, dtype=torch.int32, device=device),
        torch.tensor(tables, dtype=torch.int32, device=device),
        max(n for _, n in cases),
        max(seqlens_k),
        scale,
        backend,
    )
    reference = torch.cat(
        [dense_causal_attention(q.float(), k.float(), v.float(), scale) for q, k, v, _ in references]
    )
    return out, reference


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_mixed_prefill_prefix_and_decode_batch_matches_dense(block_size):
    cases = [(0, 7), (5, 3), (13, 1), (0, 1), (32, 9), (16, 16)]  # prefill, chunk after a prefix, decodes
    out, reference = run_paged_batch(cases, block_size)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


def test_decode_batch_matches_dense():
    out, reference = run_paged_batch([(10, 1), (3, 1), (40, 1), (0, 1)], block_size=8)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "cases",
    [
        [(0, 300), (256, 40), (700, 1), (5, 1), (0, 1), (512, 512)],  # mixed prefill / prefix / decode
        [(c, 1) for c in (1, 255, 256, 257, 1000)],  # pure decode: the Triton kernel, in 8 KV splits
        [(c, 1) for c in range(1, 6400, 100)],  # 64 rows: in one
    ],
)
def test_flash_attn_backend_matches_torch_backend_on_gpu(cases):
    pytest.importorskip("flash_attn")
    settings = dict(device="cuda", dtype=torch.bfloat16, head_dim=128)  # the trimmed build serves 128 only
    paged, dense = run_paged_batch(cases, 256, backend="flash_attn", **settings)
    reference, _ = run_paged_batch(cases, 256, backend="torch", **settings)
    torch.testing.assert_close(paged.float(), reference.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(paged.float(), dense.float(), atol=3e-2, rtol=3e-2)


def test_auto_backend_on_cuda_rejects_block_sizes_flash_attn_cannot_serve(monkeypatch):
    from nvllm.attention import FlashAttnBackend, TorchBackend, resolve_backend

    monkeypatch.setattr(FlashAttnBackend, "can_run", classmethod(lambda cls, device: device == "cuda"))
    with pytest.raises(ValueError, match="cache.block_size=16 cannot be served by the flash_attn backend"):
        resolve_backend("auto", "cuda", 16)
    assert resolve_backend("auto", "cuda", 512) is FlashAttnBackend
    assert resolve_backend("torch", "cuda", 16) is TorchBackend
    assert resolve_backend("auto", "cpu", 16) is TorchBackend


def test_flash_attn_decode_kv_splits_fill_the_gpu_with_about_512_programs_in_powers_of_two():
    from nvllm.attention import FlashAttnBackend, TorchBackend

    splits = FlashAttnBackend.decode_kv_splits
    # rows x KV heads x splits ~ 512, at most 32 splits, at least 1
    assert [splits(rows, 8) for rows in (1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 512)] == [
        32, 32, 16, 16, 8, 4, 2, 2, 1, 1, 1,
    ]  # fmt: skip
    assert [splits(rows, 4) for rows in (1, 4, 8, 128)] == [32, 32, 16, 1]  # 8 KV heads over TP=2
    assert TorchBackend.decode_kv_splits(1, 8) == 1  # the reference reads each row's KV whole
