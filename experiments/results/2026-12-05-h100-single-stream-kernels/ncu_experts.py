"""ncu driver: Qwen3-30B-A3B fp8 skinny experts at one real token + one padding token (as the engine's graph),
and the q/k/v and o skinny matmuls at 2 rows, each run a few times."""
import torch
from experiments.kernels.moe_bench import layer_experts, routed_batch, TOP_K
from nvllm.ops.moe_skinny_triton import skinny_experts
from nvllm.ops.skinny_matmul import skinny_matmul, skinny_config
from nvllm.ops.fp8 import quantize_rows

torch.manual_seed(0)
gate_up, down, gus, ds = layer_experts(True)
x, logits, weights, ids = routed_batch(2)
weights[1] = 0
for _ in range(3):
    skinny_experts(x, gate_up, down, TOP_K, routing=(weights, ids), gate_up_scale=gus, down_scale=ds)
for n, k in ((5120, 2048), (2048, 4096)):
    w, s = quantize_rows(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)
    a = torch.randn(2, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        skinny_matmul(a, w, skinny_config(n, k, weight_bytes=1), weight_scale=s)
torch.cuda.synchronize()
print("done")
