import torch
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_triton import grouped_experts
from tests.models.test_qwen3_moe_gpu import layer_inputs, relative_error
print("tf32", torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
x, gate_up, down, weights, ids = layer_inputs(64, seed=64)
(gq, gs), (dq, ds) = quantize_rows(gate_up), quantize_rows(down)
x, weights = x.to(torch.bfloat16), weights.to(torch.bfloat16)
ex = (gq, dq, weights, ids, gs, ds)
ref = experts_reference(x, *ex, quantize_activations=True).float()
cpu = experts_reference(*[t.cpu() for t in (x, *ex)], quantize_activations=True).float()
ours = grouped_experts(x, *ex, True).float()
print("ours-gpu ref", relative_error(ours, ref), "ours-cpu ref", relative_error(ours, cpu.cuda()), "gpu-cpu ref", relative_error(ref, cpu.cuda()))
