import torch
from nvllm.ops.skinny_matmul import skinny_matmul
torch.manual_seed(0)
for n, k in ((6144, 4096), (4096, 4096), (4096, 12288), (1024, 2048)):
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for rows in (1, 16):
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        ref = (x.float() @ w.float().T)
        for split in (1, 2, 4):
            ys = [skinny_matmul(x, w, (32, 256, 4, 3, split)) for _ in range(3)]
            rel = ((ys[0].float() - ref).norm() / ref.norm()).item()
            print(n, k, rows, split, f"rel {rel:.2e}", "repeatable", all(torch.equal(ys[0], y) for y in ys))
