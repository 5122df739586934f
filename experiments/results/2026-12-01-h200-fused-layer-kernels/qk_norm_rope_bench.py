# q/k norm + RoPE + KV store section of a Qwen3 attention layer (0.6B shapes), compiled, in a CUDA graph of
# REPS calls; prints us per call. Runs in either tree: the fused op where it exists, else the unfused modules.
import torch

import nvllm.ops  # noqa: F401
from nvllm.config import ModelConfig
from nvllm.layers.norm import RMSNorm
from nvllm.layers.rotary import RotaryEmbedding

REPS = 200
H, K, D = 16, 8, 128
torch.set_default_device("cuda")
fused = hasattr(torch.ops.nvllm, "qk_norm_rope_store")
config = ModelConfig()
rotary = RotaryEmbedding(config)
q_norm, k_norm = RMSNorm(D).to(torch.bfloat16), RMSNorm(D).to(torch.bfloat16)
k_cache = torch.zeros(200, 256, K, D, dtype=torch.bfloat16)
v_cache = torch.zeros_like(k_cache)
torch._dynamo.mark_static_address(k_cache, guard=False)
torch._dynamo.mark_static_address(v_cache, guard=False)


def section(qkv, positions, slot_mapping):
    if fused:
        return torch.ops.nvllm.qk_norm_rope_store(
            qkv, positions, rotary.cos_sin, q_norm.weight, k_norm.weight, 1e-6, H, K,
            k_cache, v_cache, slot_mapping, "flash_attn",
        )  # fmt: skip
    q, k, v = qkv.split([H * D, K * D, K * D], dim=-1)
    q = q_norm(q.view(-1, H, D))
    k = k_norm(k.view(-1, K, D))
    q, k = rotary(positions, q, k)
    torch.ops.nvllm.store_kvcache(k, v.view(-1, K, D), k_cache, v_cache, slot_mapping, "flash_attn")
    return q


compiled = torch.compile(section, fullgraph=True, dynamic=False)
for tokens in (1, 2, 8, 64, 512, 4096):
    qkv = torch.randn(tokens, (H + 2 * K) * D, dtype=torch.bfloat16)
    positions = torch.randint(0, 4000, (tokens,))
    slots = torch.randperm(200 * 256)[:tokens]
    for _ in range(3):
        compiled(qkv, positions, slots)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPS):
            compiled(qkv, positions, slots)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / REPS)
    print(f"{'fused' if fused else 'unfused'} tokens={tokens}: {min(times):.2f} us/call", flush=True)
