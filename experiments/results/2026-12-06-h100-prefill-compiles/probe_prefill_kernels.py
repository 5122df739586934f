"""Two prefill kernels of the 30B bench's 16,384-token steps, timed against candidates (H100, do_bench):
1. the fp8 experts' activation quantization (`moe_fp8_triton.quantize_tokens`: a program a row) against
   programs of several rows, at the hidden states' [16384, 2048] and the intermediate's [147328, 768];
2. flash-attn's varlen prefill over the paged cache (blocks of 256, as the engine calls it) against the same
   on the step's contiguous K and V, at 30 sequences of 100-1024 tokens, 32 query heads on 4 KV heads."""

import functools
import random

import torch
import triton
import triton.language as tl
from flash_attn import flash_attn_varlen_func
from triton.testing import do_bench

from nvllm.ops.moe_fp8_triton import E4M3_MAX, quantize_tokens, quantized_e4m3


@triton.jit
def _rows_kernel(
    x_ptr, q_ptr, scale_ptr, rows, width, stride_x, stride_q, ROWS: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    columns = tl.arange(0, BLOCK)
    inside = (row < rows)[:, None] & (columns < width)[None, :]
    x = tl.load(x_ptr + row[:, None] * stride_x + columns[None, :], inside, 0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    scale = tl.where(amax > 0, tl.math.div_rn(amax, E4M3_MAX), 1.0)
    tl.store(q_ptr + row[:, None] * stride_q + columns[None, :], quantized_e4m3(x, scale[:, None]), inside)
    tl.store(scale_ptr + row, scale, row < rows)


def rows_quantize(x, rows_a_program, warps):
    rows, width = x.shape
    q = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(rows, rows_a_program),)
    _rows_kernel[grid](
        x,
        q,
        scale,
        rows,
        width,
        x.stride(0),
        q.stride(0),
        ROWS=rows_a_program,
        BLOCK=triton.next_power_of_2(width),
        num_warps=warps,
    )
    return q, scale


torch.manual_seed(0)
for rows, width in ((16384, 2048), (147328, 768)):
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    bytes_ = rows * width * 3 + rows * 4
    ref_q, ref_s = quantize_tokens(x)
    t = do_bench(functools.partial(quantize_tokens, x), warmup=50, rep=300) * 1e3
    print(f"quantize [{rows}, {width}] one row a program: {t:.1f} us ({bytes_ / t / 1e6:.2f} TB/s)")
    for r in (2, 4, 8, 16):
        for w in (4, 8):
            q, s = rows_quantize(x, r, w)
            same = torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(s, ref_s)
            t = do_bench(functools.partial(rows_quantize, x, r, w), warmup=50, rep=300) * 1e3
            print(f"  {r} rows, {w} warps: {t:.1f} us ({bytes_ / t / 1e6:.2f} TB/s) same={same}")

random.seed(0)
lengths = [random.randint(100, 1024) for _ in range(30)]
total = sum(lengths)
heads, kv_heads, dim, block = 32, 4, 128, 256
q = torch.randn(total, heads, dim, device="cuda", dtype=torch.bfloat16)
k = torch.randn(total, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
v = torch.randn(total, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).to(torch.int32)
blocks_each = [triton.cdiv(n, block) for n in lengths]
num_blocks = sum(blocks_each)
k_cache = torch.zeros(num_blocks, block, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
v_cache = torch.zeros_like(k_cache)
tables = torch.zeros(len(lengths), max(blocks_each), dtype=torch.int32, device="cuda")
first = 0
for i, n in enumerate(lengths):
    for b in range(blocks_each[i]):
        tables[i, b] = first + b
        span = slice(b * block, min(n, (b + 1) * block))
        rows = slice(int(cu[i]) + span.start, int(cu[i]) + span.stop)
        k_cache[first + b, : span.stop - span.start] = k[rows]
        v_cache[first + b, : span.stop - span.start] = v[rows]
    first += blocks_each[i]
m = max(lengths)


def paged():
    return flash_attn_varlen_func(q, k_cache, v_cache, cu, cu, m, m, causal=True, block_table=tables)


def contiguous():
    return flash_attn_varlen_func(q, k, v, cu, cu, m, m, causal=True)


diff = (paged() - contiguous()).abs().max().item()
flops = sum(4 * n * (n + 1) / 2 * heads * dim for n in lengths)
for name, fn in (("paged", paged), ("contiguous", contiguous)):
    t = do_bench(fn, warmup=50, rep=300) * 1e3
    rate = f"{flops / t / 1e6:.0f} TFLOP/s"
    print(f"flash-attn prefill {total} tokens, {name}: {t:.1f} us ({rate}) max diff {diff}")
