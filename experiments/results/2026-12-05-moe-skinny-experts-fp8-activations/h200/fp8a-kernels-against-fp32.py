import torch
from nvllm.ops.fp8 import quantize_rows, dequantize_groups
from nvllm.ops import moe_fp8_triton
from nvllm.ops.moe_fp8_triton import grouped_fp8_matmul
from nvllm.ops.moe_tiles import fp8_activation_config, row_tile
from nvllm.ops.moe_routing import route
from nvllm.ops.moe_triton import align_by_expert
import torch.nn.functional as F
torch.manual_seed(0)
T, E, K, H, I = 64, 128, 8, 2048, 768
x = torch.randn(T, H, device="cuda").bfloat16()
gu = torch.randn(E, 2 * I, H, device="cuda") * 0.02
gq, gs = quantize_rows(gu)
w, ids = route(torch.randn(T, E, device="cuda"), K, True)
bm = row_tile(T * K, E)
sp, te = align_by_expert(ids, E, bm)
xq, xs = moe_fp8_triton.quantize_tokens(x)
cfg = fp8_activation_config(T * K, E, True)
slots = sp.numel()
act = torch.empty(slots, I, dtype=torch.float8_e4m3fn, device="cuda")
acts = torch.empty(I // 64, slots, device="cuda")
grouped_fp8_matmul(xq, xs, gq, gs, act, acts, sp, te, w.flatten().contiguous(), bm, K, cfg)
torch.cuda.synchronize()
valid = sp < T * K
sv = torch.nonzero(valid).flatten()
pairs = sp[sv]; tok = pairs // K; ex = ids.flatten()[pairs]
ref = (xq[tok].float() @ gq[ex].float().transpose(1, 2).squeeze(1) if False else torch.stack([xq[t].float() @ gq[e].float().T for t, e in zip(tok.tolist(), ex.tolist())])) * xs[tok][:, None] * gs[ex]
g, u = ref.chunk(2, -1); refa = F.silu(g) * u
ours = act[sv].float() * acts[:, sv].T.repeat_interleave(64, 1)
err = (ours - refa).abs() / refa.abs().amax(1, keepdim=True)
pos = sv % bm
print("by slot position in tile:", [round(err[pos == p].mean().item(), 4) for p in range(bm) if (pos == p).any()])
print("by column block of 8:", [round(err[:, c:c+8].mean().item(), 4) for c in range(0, 64, 8)])
print("by group:", [round(err[:, c:c+64].mean().item(), 4) for c in range(0, I, 64)])
print("overall", err.mean().item(), "max", err.max().item())
dn = torch.randn(E, H, I, device="cuda") * 0.02
dq, ds = quantize_rows(dn)
dcfg = fp8_activation_config(T * K, E, False)
out = torch.empty(T * K, H, device="cuda")
grouped_fp8_matmul(act, acts, dq, ds, out, None, sp, te, w.flatten().contiguous(), bm, K, dcfg)
torch.cuda.synchronize()
deq = act.float() * acts.T.repeat_interleave(64, 1)
refd = torch.stack([deq[s] @ dq[e].float().T for s, e in zip(sv.tolist(), ex.tolist())]) * ds[ex] * w.flatten()[pairs][:, None].float()
o = out[pairs]
e2 = (o - refd).abs() / refd.abs().amax(1, keepdim=True)
print("down by slot position:", [round(e2[pos == p].mean().item(), 5) for p in range(bm) if (pos == p).any()])
print("down by column block of 256:", [round(e2[:, c:c+256].mean().item(), 5) for c in range(0, H, 256)])
print("down overall", e2.mean().item(), e2.max().item(), dcfg)
