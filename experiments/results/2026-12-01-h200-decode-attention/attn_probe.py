"""Probe (run `attention-tiles`): the decode attention kernel's BLOCK_N / warps / stages at the benches' shapes,
and rows taken longest first (LPT) against in order. The call ran a hand-written copy of the kernel with the
row read from `order`; kept here, that variant is derived from the kernel's own source (the same edit)."""
import itertools, sys, multiprocessing
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import torch
import triton
import triton.language as tl

from experiments.kernels.skinny_matmul_bench import time_us
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


def _ordered_kernel_from_source():
    """`_paged_decode_kernel` whose program (i, head, split) takes row order[i] (rows longest first): its source
    with the row read from `order_ptr`, written to a module of its own (Triton compiles from source files)."""
    import importlib.util, inspect, tempfile
    source = inspect.getsource(pda._paged_decode_kernel.fn)
    source = source.replace("    lse_ptr,\n", "    lse_ptr,\n    order_ptr,\n", 1)
    source = source.replace("row = tl.program_id(0)", "row = tl.load(order_ptr + tl.program_id(0))")
    source = source.replace("    wait_for_prior_kernel(PDL)\n", "", 1).replace("launch_next_kernel(PDL)", "pass")
    source = source.replace("_paged_decode_kernel", "_ordered_kernel")
    path = tempfile.mkdtemp() + "/ordered_decode.py"
    with open(path, "w") as file:
        file.write("import triton\nimport triton.language as tl\n\n" + source)
    spec = importlib.util.spec_from_file_location("ordered_decode", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._ordered_kernel


_ordered_kernel = _ordered_kernel_from_source()


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
