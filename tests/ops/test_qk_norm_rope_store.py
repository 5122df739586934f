"""`nvllm::qk_norm_rope_store` against the modules it fuses (per-head RMSNorm, RoPE) and a cache write
spelled out slot by slot; on the GPU, the Triton kernel against the torch implementation."""

import pytest
import torch

import nvllm.ops  # noqa: F401
from nvllm.config import ModelConfig
from nvllm.layers.norm import RMSNorm
from nvllm.layers.rotary import RotaryEmbedding
from nvllm.ops.rope import rotate_half

EPS = 1e-6
ROPE = {
    "default": {},
    "yarn": dict(rope_scaling="yarn", rope_scaling_factor=4.0, rope_original_max_position_embeddings=16),
}


class Case:
    """A batch's packed qkv rows (a view with a row stride wider than the row, as the op may be given),
    norms, cos/sin, and caches filled with noise that a test checks is left alone outside the slots."""

    def __init__(
        self,
        num_heads,
        num_kv_heads,
        head_dim,
        slots,
        positions,
        dtype,
        device="cpu",
        rope="default",
        num_blocks=8,
        block_size=4,
        seed=0,
    ):
        generator = torch.Generator().manual_seed(seed)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        width = (num_heads + 2 * num_kv_heads) * head_dim
        config = ModelConfig(head_dim=head_dim, rope_theta=10000.0, max_position_embeddings=64, **ROPE[rope])
        self.rotary = RotaryEmbedding(config).to(device)
        self.q_norm, self.k_norm = RMSNorm(head_dim, EPS), RMSNorm(head_dim, EPS)
        for norm in (self.q_norm, self.k_norm):  # weights away from 1, in the model's dtype as loaded
            norm.weight.data = (0.8 + 0.4 * torch.rand(head_dim, generator=generator)).to(device, dtype)
        rows = torch.randn(len(slots), width + 8, generator=generator)
        self.qkv = rows.to(device, dtype)[:, :width]
        self.positions = torch.tensor(positions, dtype=torch.int64, device=device)
        self.slot_mapping = torch.tensor(slots, dtype=torch.int64, device=device)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache = torch.randn(shape, generator=generator).to(device, dtype)
        self.v_cache = torch.randn(shape, generator=generator).to(device, dtype)

    def run(self, backend, slot_dtype=torch.int64):
        """The op's queries and the caches it wrote (the case's own caches stay as they were)."""
        k_cache, v_cache = self.k_cache.clone(), self.v_cache.clone()
        query = torch.ops.nvllm.qk_norm_rope_store(
            self.qkv,
            self.positions,
            self.rotary.cos_sin,
            self.q_norm.weight,
            self.k_norm.weight,
            EPS,
            self.num_heads,
            self.num_kv_heads,
            k_cache,
            v_cache,
            self.slot_mapping.to(slot_dtype),
            backend,
        )
        return query, k_cache, v_cache

    def unfused(self):
        """What the modules compute, one after the other, and the caches with each token's K/V at its slot."""
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        query, key, value = self.qkv.split([q_size, kv_size, kv_size], dim=-1)
        query = self.q_norm(query.unflatten(-1, (self.num_heads, self.head_dim)))
        key = self.k_norm(key.unflatten(-1, (self.num_kv_heads, self.head_dim)))
        cos, sin = self.rotary.cos_sin[self.positions].unsqueeze(1).chunk(2, dim=-1)
        query, key = rotate_half(query, cos, sin), rotate_half(key, cos, sin)
        value = value.unflatten(-1, (self.num_kv_heads, self.head_dim))
        k_cache, v_cache = self.k_cache.clone(), self.v_cache.clone()
        for token, slot in enumerate(self.slot_mapping.tolist()):
            if slot >= 0:
                k_cache.view(-1, self.num_kv_heads, self.head_dim)[slot] = key[token]
                v_cache.view(-1, self.num_kv_heads, self.head_dim)[slot] = value[token]
        return query, k_cache, v_cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rope", ["default", "yarn"])
@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 2), (8, 2), (3, 1)])
def test_torch_op_computes_what_the_unfused_modules_compute(dtype, rope, num_heads, num_kv_heads):
    # a prefill's tokens at scattered slots, padded tokens (-1) among and after them
    slots = [5, 6, -1, 0, 31, 12, -1, -1]
    positions = [0, 1, 0, 63, 7, 8, 0, 0]
    case = Case(num_heads, num_kv_heads, 16, slots, positions, dtype, rope=rope)
    query, k_cache, v_cache = case.run("torch")
    expected_query, expected_k_cache, expected_v_cache = case.unfused()
    assert query.shape == (len(slots), num_heads, 16) and query.is_contiguous() and query.dtype == dtype
    assert torch.equal(query, expected_query)
    assert torch.equal(k_cache, expected_k_cache)
    assert torch.equal(v_cache, expected_v_cache)
    for cache, original in ((k_cache, case.k_cache), (v_cache, case.v_cache)):
        assert_only_slots_written(cache, original, case.slot_mapping)


def test_every_padded_token_writes_nothing():
    case = Case(4, 2, 16, [-1, -1, -1], [3, 4, 5], torch.float32)
    query, k_cache, v_cache = case.run("torch")
    assert torch.equal(k_cache, case.k_cache) and torch.equal(v_cache, case.v_cache)
    assert torch.equal(query, case.unfused()[0])


def assert_only_slots_written(cache, original, slot_mapping):
    """Every slot of `slot_mapping` (but -1) differs from `original`, and every other slot is as it was."""
    written = torch.zeros(cache.shape[0] * cache.shape[1], dtype=torch.bool, device=cache.device)
    written[slot_mapping[slot_mapping >= 0]] = True
    changed = (cache != original).flatten(2).any(-1).flatten()
    assert torch.equal(changed, written)


def assert_near_exact(actual, expected):
    """Both compute in fp32 and round the same way; rsqrt's and fused multiply-adds' last bits may flip a
    rare rounding, by one step of the dtype, and nothing more."""
    torch.testing.assert_close(actual.float(), expected.float(), atol=2e-2, rtol=1e-2)
    assert (actual != expected).float().mean().item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize(
    "num_heads, num_kv_heads, num_tokens",
    [
        (16, 8, 1),  # a decode step of one sequence (0.6B)
        (16, 8, 64),
        (32, 8, 3),  # 8B
        (8, 2, 5),  # 32 query heads and 8 KV heads over TP=4
        (4, 1, 300),
        (16, 8, 4096),  # a prefill
    ],
)
def test_triton_kernel_matches_torch_op_on_gpu(num_heads, num_kv_heads, num_tokens, slot_dtype):
    pytest.importorskip("triton")
    block_size, num_blocks = 256, 20
    generator = torch.Generator().manual_seed(num_tokens)
    slots = torch.randperm(num_blocks * block_size, generator=generator)[:num_tokens]
    slots[torch.rand(num_tokens, generator=generator) < 0.2] = -1  # padded tokens among the others
    positions = torch.randint(0, 64, (num_tokens,), generator=generator)
    for rope in ROPE:
        case = Case(
            num_heads,
            num_kv_heads,
            128,
            slots.tolist(),
            positions.tolist(),
            torch.bfloat16,
            device="cuda",
            rope=rope,
            num_blocks=num_blocks,
            block_size=block_size,
            seed=num_tokens,
        )
        query, k_cache, v_cache = case.run("flash_attn", slot_dtype)
        expected_query, expected_k_cache, expected_v_cache = case.run("torch")
        assert query.shape == expected_query.shape and query.is_contiguous()
        assert_near_exact(query, expected_query)
        assert_near_exact(k_cache, expected_k_cache)
        assert torch.equal(v_cache, expected_v_cache)  # copied as it is
        assert_only_slots_written(k_cache, case.k_cache, case.slot_mapping)
        assert_only_slots_written(v_cache, case.v_cache, case.slot_mapping)


@pytest.mark.gpu
def test_triton_kernel_writes_slots_past_two_to_the_31_cache_elements():
    pytest.importorskip("triton")
    block_size, num_blocks, num_kv_heads = 256, 8400, 8  # a 4.4 GB cache of 2.2e9 elements a layer
    last = num_blocks * block_size - 1
    case = Case(16, num_kv_heads, 128, [last, -1, 3], [5, 0, 9], torch.bfloat16, "cuda", "default", 1, 1)
    shape = (num_blocks, block_size, num_kv_heads, 128)
    case.k_cache = torch.zeros(shape, dtype=torch.bfloat16, device="cuda")
    case.v_cache = torch.zeros_like(case.k_cache)
    query, k_cache, v_cache = case.run("flash_attn")
    expected_query, expected_k_cache, expected_v_cache = case.unfused()
    assert_near_exact(query, expected_query)
    written = [last, 3]
    assert_near_exact(k_cache.flatten(0, 1)[written], expected_k_cache.flatten(0, 1)[written])
    assert torch.equal(v_cache.flatten(0, 1)[written], expected_v_cache.flatten(0, 1)[written])
    for cache in (k_cache, v_cache):
        cache.flatten(0, 1)[written] = 0
        assert not cache.any()  # nothing written anywhere else
