from functools import partial
import torch, torch.nn.functional as F
from experiments.skinny_matmul_bench import time_us
from nvllm.ops.skinny_matmul import skinny_matmul
from nvllm.ops.skinny_plan import skinny_config
from nvllm.ops.add_rms_norm import add_rms_norm
torch.manual_seed(0)
for n, k, gated in [(4096, 1024, False), (6144, 1024, True), (6144, 4096, False), (24576, 4096, True)]:
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    nw = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    cfg = skinny_config(n, k, gated, 16)
    line = f"{n}x{k} gated={gated} cfg={cfg}:"
    for m in (1, 2, 16):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); r = torch.randn_like(x)
        plain = time_us(partial(skinny_matmul, x, w, cfg, gated=gated, row_tile=16))
        normed = time_us(partial(skinny_matmul, x, w, cfg, gated=gated, norm=(r, nw, 1e-6), row_tile=16))
        norm_only = time_us(partial(add_rms_norm, x, r, nw, 1e-6))
        line += f" M={m} plain {plain:.1f} normed {normed:.1f} add_rms_norm {norm_only:.1f} |"
    print(line, flush=True)
for m in (128, 256, 2048, 8192):
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16); r = torch.randn_like(x)
    nw = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    def inductor_like(x=x, r=r):
        s = x.float() + r.float(); return (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16() * nw, s.bfloat16()
    c = torch.compile(inductor_like)
    print(f"add_rms_norm M={m}: triton {time_us(partial(add_rms_norm, x, r, nw, 1e-6)):.1f} inductor {time_us(c):.1f}", flush=True)
