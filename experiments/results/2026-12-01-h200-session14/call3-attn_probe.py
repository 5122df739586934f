"""Probe (not committed): the decode attention kernel's BLOCK_N / warps / stages at the benches' shapes, and
rows taken longest first (LPT) against in order."""
import itertools, sys, multiprocessing
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import torch
import triton
import triton.language as tl

from experiments.skinny_matmul_bench import time_us
from nvllm.ops import paged_decode_attention as pda

KV_HEADS, HEAD_DIM, BLOCK = 8, 128, 256
NUM_BLOCKS = 6144
CONFIGS = list(itertools.product((32, 64, 128), (2, 4, 8), (2, 3, 4)))


def launch(query, k_cache, v_cache, seqlens, tables, order, cfg, splits):
    block_n, warps, stages = cfg
    rows, heads, _ = query.shape
    out = torch.empty_like(query)
    lse = torch.empty((rows, heads), dtype=torch.float32, device=query.device)
    so, sl = out, lse
    if splits > 1:
        so = query.new_empty((splits, *query.shape), dtype=torch.float32)
        sl = lse.new_empty((splits, rows, heads))
    kern = _ordered_kernel if order is not None else pda._paged_decode_kernel
    extra = (order,) if order is not None else ()
    kern[(rows, KV_HEADS, splits)](
        query, k_cache, v_cache, tables, seqlens, so, sl, *extra,
        query.stride(0), query.stride(1), so.stride(-3), so.stride(-2), tables.stride(0), HEAD_DIM**-0.5,
        BLOCK_SIZE=BLOCK, NUM_KV_HEADS=KV_HEADS, GROUP=heads // KV_HEADS, GROUP_ROWS=16, HEAD_DIM=HEAD_DIM,
        BLOCK_N=block_n, NUM_SPLITS=splits, PDL=False, num_warps=warps, num_stages=stages)
    if splits > 1:
        pda._combine_splits_kernel[(rows, heads)](so, sl, out, lse, out.stride(0), out.stride(1),
                                                  NUM_HEADS=heads, HEAD_DIM=HEAD_DIM, NUM_SPLITS=splits, PDL=False)
    return out


@triton.jit
def _ordered_kernel(query_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seqlens_ptr, out_ptr, lse_ptr, order_ptr,
                    query_row_stride, query_head_stride, out_row_stride, out_head_stride, block_table_stride, scale,
                    BLOCK_SIZE: tl.constexpr, NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_ROWS: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, PDL: tl.constexpr):
    # program (i, head, split) takes row order[i]: rows longest first
    row = tl.load(order_ptr + tl.program_id(0))
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seqlen = tl.load(seqlens_ptr + row)
    split_len = tl.cdiv(tl.cdiv(seqlen, NUM_SPLITS), BLOCK_N) * BLOCK_N
    split_start = split * split_len
    split_end = tl.minimum(seqlen, split_start + split_len)
    group = tl.arange(0, GROUP_ROWS)
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + group
    in_group = group < GROUP
    query = tl.load(query_ptr + row * query_row_stride + heads[:, None] * query_head_stride + dims[None, :],
                    mask=in_group[:, None], other=0.0)
    running_max = tl.full([GROUP_ROWS], float("-inf"), tl.float32)
    normaliser = tl.zeros([GROUP_ROWS], tl.float32)
    acc = tl.zeros([GROUP_ROWS, HEAD_DIM], tl.float32)
    tokens = tl.arange(0, BLOCK_N)
    for start in range(split_start, split_end, BLOCK_N):
        block = tl.load(block_tables_ptr + row * block_table_stride + start // BLOCK_SIZE).to(tl.int64)
        slots = block * BLOCK_SIZE + start % BLOCK_SIZE + tokens
        inside = start + tokens < split_end
        offsets = (slots[:, None] * NUM_KV_HEADS + kv_head) * HEAD_DIM + dims[None, :]
        key = tl.load(k_cache_ptr + offsets, mask=inside[:, None], other=0.0)
        scores = tl.dot(query, tl.trans(key)) * scale
        scores = tl.where(inside[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(running_max - new_max)
        normaliser = normaliser * rescale + tl.sum(weights, 1)
        value = tl.load(v_cache_ptr + offsets, mask=inside[:, None], other=0.0)
        acc = acc * rescale[:, None] + tl.dot(weights.to(value.dtype), value)
        running_max = new_max
    attended = normaliser > 0
    safe_normaliser = tl.where(attended, normaliser, 1.0)
    out = tl.where(attended[:, None], acc / safe_normaliser[:, None], 0.0)
    num_rows = tl.num_programs(0)
    out_ptr += split * num_rows * out_row_stride
    tl.store(out_ptr + row * out_row_stride + heads[:, None] * out_head_stride + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=in_group[:, None])
    lse = tl.where(attended, running_max + tl.log(safe_normaliser), float("-inf"))
    lse_ptr += (split * num_rows + row) * NUM_KV_HEADS * GROUP
    tl.store(lse_ptr + heads, lse, mask=in_group)


def cases():
    # (label, rows, low, high): each row's length uniform in [low, high]
    for rows in (64, 128, 256):
        for low, high in ((512, 1024), (100, 2048)):
            yield rows, low, high
    yield 16, 500, 1500
    yield 32, 500, 1500


def splits_for(rows):
    s = min(32, 512 // (rows * KV_HEADS))
    return 1 << (s.bit_length() - 1) if s > 1 else 1


def setup(heads, rows, low, high, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    query = torch.randn(rows, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    width = -(-high // BLOCK)
    tables = torch.randperm(NUM_BLOCKS, device="cuda", generator=g)[: rows * width].to(torch.int32).view(rows, width)
    seqlens = torch.randint(low, high + 1, (rows,), dtype=torch.int32, device="cuda", generator=g)
    order = torch.argsort(seqlens, descending=True).to(torch.int32)
    return query, tables, seqlens, order


def compile_one(trial):
    cfg, heads, ordered, splits = trial
    k = torch.zeros(64, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    q, tables, seqlens, order = setup(heads, 4, 100, 300)
    tables = tables % 64
    try:
        launch(q, k, k, seqlens, tables, order if ordered else None, cfg, splits); torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return f"{trial}: {type(e).__name__}"


if __name__ == "__main__":
    import attn_probe as me
    trials = [(c, h, o, s) for c in CONFIGS for h in (16, 32) for o, s in ((False, 1), (True, 1), (False, 2), (False, 4))]
    with ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("spawn")) as pool:
        bad = [e for e in pool.map(me.compile_one, trials) if e]
    print(len(trials), "compiled,", len(bad), "failed:", bad[:6], flush=True)
    k_cache = torch.randn(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    base = (64, 4, 2)
    for heads in (16, 32):
        for rows, low, high in cases():
            q, tables, seqlens, order = setup(heads, rows, low, high)
            splits = splits_for(rows)
            gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 * 2 / 1e9
            ref = launch(q, k_cache, v_cache, seqlens, tables, None, base, splits)
            res = {}
            for cfg in CONFIGS:
                for ordered in ((False, True) if splits == 1 else (False,)):
                    try:
                        out = launch(q, k_cache, v_cache, seqlens, tables, order if ordered else None, cfg, splits)
                    except Exception:  # noqa: BLE001
                        continue
                    if not torch.allclose(out.float(), ref.float(), atol=2e-2, rtol=2e-2):
                        print("WRONG", cfg, ordered); continue
                    res[(cfg, ordered)] = time_us(partial(launch, q, k_cache, v_cache, seqlens, tables,
                                                          order if ordered else None, cfg, splits))
            top = sorted(res.items(), key=lambda kv: kv[1])[:4]
            b = res[(base, False)]
            print(f"heads {heads} rows {rows} len [{low},{high}] splits {splits} {gb*1e3:.0f} MB: now {b:.1f}us "
                  f"({gb/b*1e3:.2f} TB/s); LPT now-cfg {res.get((base, True), float('nan')):.1f} | best: "
                  + " ".join(f"{c}{'L' if o else ''} {t:.1f} ({gb/t*1e3:.2f})" for (c, o), t in top), flush=True)
    # the best configs overall: summed time over all cases, per model
