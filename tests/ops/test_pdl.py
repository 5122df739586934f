"""Programmatic dependent launch (`nvllm.ops.pdl`): the engine's Triton kernels, launched so that each may
start before the one before it has finished, give the results of kernels launched one after another, in a
CUDA graph replayed with new inputs each time."""

import pytest
import torch

pytestmark = pytest.mark.gpu


def decode_layer_chain(qkv_weight, o_weight, gate_up_weight, k_cache, v_cache, tables, seqlens, slots, x):
    """A decode layer's own kernels one after the other, each reading what the one before wrote: qkv, q/k
    norm + RoPE + KV store, decode attention in splits and their combine, o, gate/up with the activation."""
    from nvllm.ops.paged_decode_attention import paged_decode_attention
    from nvllm.ops.qk_norm_rope_kernel import qk_norm_rope_store
    from nvllm.ops.skinny_matmul import skinny_config, skinny_matmul

    heads, kv_heads, head_dim = 16, 8, 128
    qkv = skinny_matmul(x, qkv_weight, skinny_config(*qkv_weight.shape))
    positions = (seqlens - 1).long()
    cos_sin = torch.ones(4096, head_dim, device=x.device, dtype=x.dtype) * 0.5
    norm_weight = torch.ones(head_dim, device=x.device, dtype=x.dtype)
    query = qk_norm_rope_store(
        qkv, positions, cos_sin, norm_weight, norm_weight, 1e-6, heads, kv_heads, k_cache, v_cache, slots
    )
    attended, _ = paged_decode_attention(query, k_cache, v_cache, seqlens, tables, head_dim**-0.5, 8)
    o = skinny_matmul(attended.flatten(1), o_weight, skinny_config(*o_weight.shape))
    return skinny_matmul(o, gate_up_weight, skinny_config(*gate_up_weight.shape, gated=True), gated=True)


def test_kernels_launched_with_pdl_in_a_cuda_graph_match_serialized_ones(monkeypatch):
    from nvllm.ops import pdl

    if not pdl.pdl_launch(torch.device("cuda"))["PDL"]:
        pytest.skip("the GPU has no programmatic dependent launch (compute capability 9.0 or later)")
    torch.manual_seed(0)
    device, dtype = torch.device("cuda"), torch.bfloat16
    rows, hidden, block_size, num_blocks = 4, 1024, 256, 16

    def weight(out_features, in_features):
        return torch.randn(out_features, in_features, device=device, dtype=dtype) / in_features**0.5

    weights = weight((16 + 2 * 8) * 128, hidden), weight(hidden, 16 * 128), weight(2 * 3072, hidden)
    tables = torch.arange(num_blocks, device=device, dtype=torch.int32).view(rows, -1)
    seqlens = torch.tensor([700, 1, 255, 1024], device=device, dtype=torch.int32)
    slots = (tables[:, 0].long() * block_size + seqlens.long() - 1) % (num_blocks * block_size)
    x = torch.empty(rows, hidden, device=device, dtype=dtype)

    def run(caches, graph_inputs):
        k_cache, v_cache = caches
        return decode_layer_chain(*weights, k_cache, v_cache, tables, seqlens, slots, graph_inputs)

    def fresh_caches():
        generator = torch.Generator(device).manual_seed(1)
        shape = (num_blocks, block_size, 8, 128)
        return tuple(torch.randn(shape, device=device, dtype=dtype, generator=generator) for _ in range(2))

    inputs = [torch.randn(rows, hidden, device=device, dtype=dtype) for _ in range(5)]
    outputs = {}
    for launch in ("pdl", "serialized"):
        if launch == "serialized":
            monkeypatch.setattr(pdl, "_supported", lambda device_index: False)
        caches = fresh_caches()
        x.copy_(inputs[0])
        run(caches, x)  # compiles outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run(caches, x)
        replays = []
        for _ in range(20):  # each replay's inputs are new, and its KV writes land in the caches
            for step_input in inputs:
                x.copy_(step_input)
                graph.replay()
                replays.append(out.clone())
        outputs[launch] = torch.stack(replays), caches
    torch.cuda.synchronize()
    (pdl_out, pdl_caches), (serial_out, serial_caches) = outputs["pdl"], outputs["serialized"]
    assert torch.equal(pdl_out, serial_out)
    assert all(torch.equal(a, b) for a, b in zip(pdl_caches, serial_caches))
