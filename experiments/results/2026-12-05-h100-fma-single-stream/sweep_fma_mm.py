import itertools, json, torch
from functools import partial
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import skinny_matmul as sm
from nvllm.ops.fp8 import quantize_rows
torch.manual_seed(0)
SHAPES = [("qkv", 5120, 2048, True), ("o", 2048, 4096, True), ("router", 128, 2048, False), ("lm_head", 151936, 2048, False)]
GRID = [c for c in itertools.product((2, 4, 8, 16), (256, 512, 1024, 2048, 4096), (4, 8), (1,)) if 2 * c[0] * c[1] <= 64 * 32 * c[2]]
best = {}
for name, n, k, fp8 in SHAPES:
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    scale = None
    if fp8:
        w, scale = quantize_rows(w)
    x = torch.randn(2, k, device="cuda", dtype=torch.bfloat16)
    key = (n, k, w.element_size())
    sm.FMA_CONFIGS.pop(key, None)
    config = sm.skinny_config(n, k, weight_bytes=w.element_size())
    table = time_us(partial(sm.skinny_matmul, x, w, config, weight_scale=scale))
    timed = []
    for c in GRID:
        if c[1] > (1 << (k - 1).bit_length()):
            continue
        try:
            timed.append((time_us(partial(sm.fma_matmul, x, w, c, weight_scale=scale)), c))
        except Exception as e:
            print(name, c, type(e).__name__)
    timed.sort()
    print(f"{name} {n}x{k} {'fp8' if fp8 else 'bf16'}: table {config} {table:.1f} us; on CUDA cores best {timed[:4]}", flush=True)
    if timed[0][0] < table:
        best[str(key)] = timed[0][1]
json.dump(best, open("/tmp/best_mm.json", "w"))
print(best)
