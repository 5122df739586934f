"""Qwen3-30B-A3B's MoE layer at decode batch sizes: bf16 experts, fp8 by moving bits, fp8 by Triton's
conversion, fp8 against fp16 activations (Triton's e4m3x2->f16x2, one instruction a pair); each matmul alone.
`ncu` mode: run the fp8-bits layer a few times at 256 and 64 tokens, and the fp16 one at 256."""
import sys
from functools import partial
import torch
from experiments.kernels.moe_bench import layer_experts, routed_batch, TOP_K, NUM_EXPERTS, INTERMEDIATE
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import e4m3_to_bf16
from nvllm.ops.moe_triton import grouped_experts, align_by_expert, grouped_matmul
from nvllm.ops.moe_tiles import row_tile, matmul_config

torch.manual_seed(0)
bf = layer_experts(False)
f8 = layer_experts(True)

def halves(x, weights, ids, fp8):
    """gate/up alone and down alone, µs"""
    gate_up, down, gus, ds = f8 if fp8 else bf
    n = ids.numel()
    bm = row_tile(n, NUM_EXPERTS)
    sp, te = align_by_expert(ids, NUM_EXPERTS, bm)
    pw = weights.flatten().contiguous()
    act = x.new_empty((n, INTERMEDIATE))
    out = torch.empty((n, x.shape[1]), dtype=torch.float32, device=x.device)
    g = partial(grouped_matmul, x, gate_up, act, sp, te, pw, bm, TOP_K, True, False,
                matmul_config(n, NUM_EXPERTS, True, fp8), gus)
    d = partial(grouped_matmul, act, down, out, sp, te, pw, bm, 1, False, True,
                matmul_config(n, NUM_EXPERTS, False, fp8), ds)
    return time_us(g), time_us(d)

if sys.argv[1:] == ["ncu"]:
    for tokens in (256, 64):
        x, _, w, ids = routed_batch(tokens)
        e4m3_to_bf16.ENABLED = True
        for _ in range(2):
            grouped_experts(x, *f8[:2], w, ids, *f8[2:])
        if tokens == 256:
            for _ in range(2):
                grouped_experts(x.half(), *f8[:2], w, ids, *f8[2:])
    torch.cuda.synchronize()
    sys.exit()

for tokens in (16, 32, 64, 128, 256, 512):
    x, _, w, ids = routed_batch(tokens)
    row = {}
    row["bf16"] = time_us(partial(grouped_experts, x, *bf[:2], w, ids))
    e4m3_to_bf16.ENABLED = True
    row["fp8 bits"] = time_us(partial(grouped_experts, x, *f8[:2], w, ids, *f8[2:]))
    gu, dn = halves(x, w, ids, True)
    e4m3_to_bf16.ENABLED = False
    row["fp8 triton"] = time_us(partial(grouped_experts, x, *f8[:2], w, ids, *f8[2:]))
    xh = x.half()
    row["fp8 x fp16"] = time_us(partial(grouped_experts, xh, *f8[:2], w, ids, *f8[2:]))
    gu16, dn16 = halves(xh, w, ids, True)
    gub, dnb = halves(x, w, ids, False)
    print(f"{tokens:4d} tokens: " + ", ".join(f"{k} {v:6.1f}" for k, v in row.items())
          + f" | gate/up+down: bits {gu:5.1f}+{dn:5.1f}, fp16 {gu16:5.1f}+{dn16:5.1f}, bf16 {gub:5.1f}+{dnb:5.1f} us",
          flush=True)
