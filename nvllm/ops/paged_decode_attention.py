"""Decode attention over the paged cache in Triton: one query per sequence, returning the log-sum-exp.

flash-attn's decode kernel gives each (sequence, KV head) a thread block of 64 query rows, of which a
grouped-query head fills only the group's few, and enough shared memory that two such blocks fit on an SM.
Over a short KV (early decode steps, cascade's remainders) each block's fixed work, loading its queries
and writing its output, is most of its time, and so few blocks per SM leave the memory system idle. Here
one program is a (sequence, KV head) too, but with its group's queries padded only to the tensor cores' 16
rows, so several programs share an SM and their loads overlap.

A batch of a few sequences has too few (sequence, KV head) pairs to keep the GPU's memory system busy, so
its KV can be cut into splits, one program each, whose partial outputs a second small kernel combines by
their log-sum-exps (flash-decoding).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.pdl import launch_next_kernel, overlap_prior_kernel, pdl_launch, wait_for_prior_kernel
from nvllm.ops.triton_interpreter import INTERPRETED

MIN_QUERY_ROWS = 16  # the smallest tensor-core tile: a KV head's group of queries is padded to it
# KV tokens per loop iteration (a KV block holds a whole number of them). A step of many rows, one program
# per (row, KV head) reading the row's whole KV, keeps more of it in flight with the long tile, while a
# split step's short parts would only be padded further (`python -m
# experiments.kernels.decode_attention_bench`;
# experiments/results/2026-12-01-h200-decode-attention.md).
TILE_TOKENS = 64
LONG_TILE_TOKENS = 128
LONG_TILE_MIN_PROGRAMS = 1024  # (row, KV head) programs of a step without splits


NUM_WARPS = 4
# A loop iteration's KV loads are issued this many iterations minus one ahead of its dots (Triton's
# software pipeline, a shared-memory buffer a tile in flight). With 2 they overlap no dots of the program's
# own, only other programs' on the SM: enough over a bf16 cache, and over an fp8 one in long tiles, while
# an fp8 cache's short tiles keep the next one in flight
# (experiments/results/2026-12-05-h200-decode-pipeline.md).
PIPELINE_STAGES = 2
FP8_SHORT_TILE_STAGES = 3


# A thread's registers at most (Triton's `maxnreg`; None: the compiler's choice). Over an fp8 cache read in
# pairs, registers rather than shared memory bound the programs an SM, and a cap that spills a few would fit
# one more; not yet measured (experiments/results/2026-12-05-h200-decode-pipeline.md, section 4).
MAX_REGISTERS: int | None = None


def warps_and_stages(fp8_cache: bool, tile: int) -> tuple[int, int]:
    """The launch's warps a program and pipeline stages over a cache of `tile`-token loop iterations."""
    short_fp8 = fp8_cache and tile == TILE_TOKENS
    return NUM_WARPS, FP8_SHORT_TILE_STAGES if short_fp8 else PIPELINE_STAGES


def tile_tokens(rows: int, num_kv_heads: int, num_splits: int) -> int:
    """KV tokens per loop iteration for a step of `rows` rows cut into `num_splits` splits."""
    many_programs = rows * num_kv_heads >= LONG_TILE_MIN_PROGRAMS
    return LONG_TILE_TOKENS if num_splits == 1 and many_programs else TILE_TOKENS


LOG2_E = tl.constexpr(1.4426950408889634)
LN_2 = tl.constexpr(0.6931471805599453)


@triton.jit
def e4m3_words_to_f16(words, IN_PTX: tl.constexpr):
    """`words` (int32 `[rows, n]`, each four float8 e4m3 elements, the lowest byte first) as fp16
    `[rows, 4 n]`, converted exactly: in PTX two elements an instruction, or with Triton's casts (its
    interpreter runs no PTX)."""
    if IN_PTX:
        first, second, third, fourth = tl.inline_asm_elementwise(
            "{ .reg .b16 low, high; .reg .b32 low_pair, high_pair; mov.b32 {low, high}, $4;"
            " cvt.rn.f16x2.e4m3x2 low_pair, low; cvt.rn.f16x2.e4m3x2 high_pair, high;"
            " mov.b32 {$0, $1}, low_pair; mov.b32 {$2, $3}, high_pair; }",
            "=h,=h,=h,=h,r",
            [words],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16),
            is_pure=True,
            pack=1,
        )
    else:
        first = _e4m3_byte_to_f16(words, 0)
        second = _e4m3_byte_to_f16(words, 8)
        third = _e4m3_byte_to_f16(words, 16)
        fourth = _e4m3_byte_to_f16(words, 24)
    # join stacks its pair on a new last axis, which must therefore pair neighbours: first with second, third
    # with fourth; the inner joins' axis before it then orders the two pairs
    quads = tl.join(tl.join(first, third), tl.join(second, fourth))
    return tl.reshape(quads, [words.shape[0], 4 * words.shape[1]])


@triton.jit
def e4m3_pairs_to_f16_halves(pairs, IN_PTX: tl.constexpr):
    """int16 `pairs` (two e4m3 elements each, the lower byte first) as two fp16 tensors of their shape: the
    pairs' first elements and their second ones (one instruction converts a pair)."""
    if IN_PTX:
        first, second = tl.inline_asm_elementwise(
            "{ .reg .b32 both; cvt.rn.f16x2.e4m3x2 both, $2; mov.b32 {$0, $1}, both; }",
            "=h,=h,h",
            [pairs],
            dtype=(tl.float16, tl.float16),
            is_pure=True,
            pack=1,
        )
    else:
        words = pairs.to(tl.int32)
        first = _e4m3_byte_to_f16(words, 0)
        second = _e4m3_byte_to_f16(words, 8)
    return first, second


@triton.jit
def _cache_tile_halves(cache_ptr, token_rows, inside, half_dims, IN_PTX: tl.constexpr):
    """An fp8 cache's tile `[tokens, head_dim]` (the tokens' rows `token_rows`, those not `inside` read as
    zeros) read as int16 pairs: its even dimensions and its odd ones, each `[tokens, head_dim / 2]` fp16."""
    pairs_ptr = cache_ptr.to(tl.pointer_type(tl.int16))
    pairs = tl.load(
        pairs_ptr + token_rows * half_dims.shape[0] + half_dims[None, :], mask=inside[:, None], other=0
    )
    return e4m3_pairs_to_f16_halves(pairs, IN_PTX)


@triton.jit
def _e4m3_byte_to_f16(words, shift: tl.constexpr):
    return ((words >> shift) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)


@triton.jit
def _paged_decode_kernel(
    query_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seqlens_ptr,
    out_ptr,
    lse_ptr,
    query_row_stride,
    query_head_stride,
    out_row_stride,
    out_head_stride,
    block_table_stride,
    scale,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    STAGED_FP8_VALUES: tl.constexpr,
    FP8_PAIRS: tl.constexpr,
    IN_PTX: tl.constexpr,
    HEADS_FIRST: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_prior_kernel(PDL)
    if HEADS_FIRST:
        kv_head = tl.program_id(0)
        row = tl.program_id(1)
        num_rows = tl.num_programs(1)
    else:
        row = tl.program_id(0)
        kv_head = tl.program_id(1)
        num_rows = tl.num_programs(0)
    split = tl.program_id(2)
    seqlen = tl.load(seqlens_ptr + row)
    # this split's KV tokens: a whole number of BLOCK_N tiles; splits past the end of a short row get none
    split_len = tl.cdiv(tl.cdiv(seqlen, NUM_SPLITS), BLOCK_N) * BLOCK_N
    split_start = split * split_len
    split_end = tl.minimum(seqlen, split_start + split_len)
    group = tl.arange(0, GROUP_ROWS)
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + group
    in_group = group < GROUP
    query_rows = query_ptr + row * query_row_stride + heads[:, None] * query_head_stride
    half_dims = tl.arange(0, HEAD_DIM // 2)
    if not FP8_PAIRS:
        query = tl.load(query_rows + dims[None, :], mask=in_group[:, None], other=0.0).to(DOT_DTYPE)
    else:
        # An fp8 cache read as int16 pairs of elements, one instruction converting a pair into an element of
        # the head's even dimensions and one of its odd ones: QKᵀ is the even dimensions' dot plus the odd
        # ones', and P·V gives the output's even and odd dimensions apart. Each operand then comes from a
        # 16-bit load (no join: Triton lays out a dot's operands for the narrowest load behind them), so
        # value tiles reach their dot through a transposing ldmatrix of the pairs themselves, and no
        # register moves rebuild the operands before each MMA.
        query_even = tl.load(query_rows + 2 * half_dims[None, :], mask=in_group[:, None], other=0.0)
        query_odd = tl.load(query_rows + 2 * half_dims[None, :] + 1, mask=in_group[:, None], other=0.0)
        query_even, query_odd = query_even.to(DOT_DTYPE), query_odd.to(DOT_DTYPE)
    word_dims = tl.arange(0, HEAD_DIM // 4)
    log2_scale = scale * LOG2_E
    running_max = tl.full([GROUP_ROWS], float("-inf"), tl.float32)
    normaliser = tl.zeros([GROUP_ROWS], tl.float32)
    if FP8_PAIRS:  # the output's even dimensions and its odd ones
        acc = tl.zeros([GROUP_ROWS, HEAD_DIM // 2], tl.float32)
        acc_odd = tl.zeros([GROUP_ROWS, HEAD_DIM // 2], tl.float32)
    else:
        acc = tl.zeros([GROUP_ROWS, HEAD_DIM], tl.float32)
    tokens = tl.arange(0, BLOCK_N)
    table = block_tables_ptr + row * block_table_stride
    # Each tile's block number is read an iteration ahead: read in the iteration whose KV loads it addresses,
    # it would split the loads' latency between two pipeline stages, and Triton's pipeline would keep no
    # load of the program's own in flight during its dots.
    if NUM_SPLITS == 1:
        # the row's first block, read beside its length rather than after it (a row with no KV reads it
        # too, and reads no KV through it); a short row's time is mostly such dependent loads
        block = tl.load(table).to(tl.int64)
    else:
        block = tl.load(table + split_start // BLOCK_SIZE, mask=split_start < split_end, other=0).to(tl.int64)
    for start in range(split_start, split_end, BLOCK_N):
        slots = block * BLOCK_SIZE + start % BLOCK_SIZE + tokens
        inside = start + tokens < split_end
        token_rows = slots[:, None] * NUM_KV_HEADS + kv_head
        offsets = token_rows * HEAD_DIM + dims[None, :]
        # an fp8 cache's elements convert exactly to the dot's dtype, in registers
        if FP8_PAIRS:
            key_even, key_odd = _cache_tile_halves(k_cache_ptr, token_rows, inside, half_dims, IN_PTX)
            scores = tl.dot(query_odd, tl.trans(key_odd), tl.dot(query_even, tl.trans(key_even)))
        else:
            key = tl.load(k_cache_ptr + offsets, mask=inside[:, None], other=0.0).to(DOT_DTYPE)
            scores = tl.dot(query, tl.trans(key))
        scores = scores * log2_scale  # in log2 units: exp2 takes them as they are
        scores = tl.where(inside[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.exp2(scores - new_max[:, None])
        rescale = tl.exp2(running_max - new_max)
        normaliser = normaliser * rescale + tl.sum(weights, 1)
        if FP8_PAIRS:
            value_even, value_odd = _cache_tile_halves(v_cache_ptr, token_rows, inside, half_dims, IN_PTX)
            weights_dot = weights.to(DOT_DTYPE)
            acc = acc * rescale[:, None] + tl.dot(weights_dot, value_even)
            acc_odd = acc_odd * rescale[:, None] + tl.dot(weights_dot, value_odd)
        elif STAGED_FP8_VALUES:
            # A value tile is the dot's right operand with its tokens along the reduction, but a token's
            # elements are what lie together: converted in the dot's layout, its fp8 elements would be
            # read from shared memory a byte each (Hopper has no transposing load of bytes). Converted as
            # loaded, four to a word, they reach the dot as fp16 through a transposing ldmatrix.
            words = tl.load(
                v_cache_ptr.to(tl.pointer_type(tl.int32)) + token_rows * (HEAD_DIM // 4) + word_dims[None, :],
                mask=inside[:, None],
                other=0,
            )
            value = e4m3_words_to_f16(words, IN_PTX)
        else:
            value = tl.load(v_cache_ptr + offsets, mask=inside[:, None], other=0.0).to(DOT_DTYPE)
        if not FP8_PAIRS:
            acc = acc * rescale[:, None] + tl.dot(weights.to(DOT_DTYPE), value)
        running_max = new_max
        block = tl.load(
            table + (start + BLOCK_N) // BLOCK_SIZE, mask=start + BLOCK_N < split_end, other=0
        ).to(tl.int64)
    launch_next_kernel(PDL)  # after the loop: the next kernel's programs would take this one's SM slots
    attended = normaliser > 0  # a sequence with no KV: zero output, log-sum-exp -inf
    safe_normaliser = tl.where(attended, normaliser, 1.0)
    out = tl.where(attended[:, None], acc / safe_normaliser[:, None], 0.0)
    # with splits, out and lse are this split's partials: [splits, rows, heads, ...] in fp32
    out_ptr += split * num_rows * out_row_stride
    out_rows = out_ptr + row * out_row_stride + heads[:, None] * out_head_stride
    if FP8_PAIRS:
        out_odd = tl.where(attended[:, None], acc_odd / safe_normaliser[:, None], 0.0)
        tl.store(out_rows + 2 * half_dims[None, :], out.to(out_ptr.dtype.element_ty), mask=in_group[:, None])
        tl.store(
            out_rows + 2 * half_dims[None, :] + 1,
            out_odd.to(out_ptr.dtype.element_ty),
            mask=in_group[:, None],
        )
    else:
        tl.store(out_rows + dims[None, :], out.to(out_ptr.dtype.element_ty), mask=in_group[:, None])
    lse = tl.where(attended, (running_max + tl.log2(safe_normaliser)) * LN_2, float("-inf"))
    lse_ptr += (split * num_rows + row) * NUM_KV_HEADS * GROUP
    tl.store(lse_ptr + heads, lse, mask=in_group)


@triton.jit
def _combine_splits_kernel(
    partial_out_ptr,
    partial_lse_ptr,
    out_ptr,
    lse_ptr,
    out_row_stride,
    out_head_stride,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    PDL: tl.constexpr,
):
    """One (row, head): the splits' partial outputs weighted by their share of the softmax's normaliser."""
    overlap_prior_kernel(PDL)
    row = tl.program_id(0)
    head = tl.program_id(1)
    num_rows = tl.num_programs(0)
    splits = tl.arange(0, NUM_SPLITS)
    dims = tl.arange(0, HEAD_DIM)
    partial_rows = (splits * num_rows + row) * NUM_HEADS + head
    partial_lse = tl.load(partial_lse_ptr + partial_rows)
    lse_max = tl.max(partial_lse, 0)
    safe_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # no split attended: zeros and -inf
    weights = tl.exp(partial_lse - safe_max)
    total = tl.sum(weights, 0)
    partial_out = tl.load(partial_out_ptr + partial_rows[:, None] * HEAD_DIM + dims[None, :])
    out = tl.sum(partial_out * weights[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + row * out_row_stride + head * out_head_stride + dims, out.to(out_ptr.dtype.element_ty))
    lse = tl.where(total > 0, safe_max + tl.log(total), float("-inf"))
    tl.store(lse_ptr + row * NUM_HEADS + head, lse)


FP8_DOT_DTYPE = tl.float16


def dot_dtype(query_dtype: torch.dtype, cache_dtype: torch.dtype) -> tl.dtype:
    """The dtype the kernel's two dots take their operands in: the queries' own over a 16-bit cache.
    Over an fp8 cache, fp16: one instruction converts two e4m3 elements to fp16, where bf16 takes a
    detour through fp32, and the conversion is exact in both (fp16 keeps more of the queries' and the
    softmax weights' mantissa; their range is far inside fp16's)."""
    if cache_dtype == torch.float8_e4m3fn:
        return FP8_DOT_DTYPE
    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[query_dtype]


# An fp8 cache read as pairs of elements, each dot split into the head's even and odd dimensions: every
# operand from a 16-bit load, fewer instructions and less shared memory than the dots' own fp8 layouts,
# and faster (experiments/results/2026-12-05-h100-fp8-decode-pairs.md).
FP8_ELEMENT_PAIRS = True
STAGE_FP8_VALUES = True  # False: convert an fp8 value tile in the dot's layout (the bench's comparison)
# The grid's fastest axis, the order programs start in. KV heads first: a row's heads run side by side and
# read each token's KV, all heads of it adjacent in the cache, at about the same time; rows first: the
# programs running together each read one head's slice of every token (the bench's comparison).
HEADS_FIRST = True
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second axis, where heads first puts the rows


def register_budget(max_registers: int | None) -> dict[str, int]:
    """The launch option that caps a thread's registers, none for the compiler's choice."""
    return {"maxnreg": max_registers} if max_registers else {}


def decode_grid(rows: int, num_kv_heads: int, num_splits: int) -> tuple[tuple[int, int, int], bool]:
    """The kernel's grid and whether it starts heads first (`HEADS_FIRST`, unless the rows are more than
    the grid's second axis takes: rows first then, on the first axis)."""
    heads_first = HEADS_FIRST and rows <= MAX_GRID_Y
    grid = (num_kv_heads, rows, num_splits) if heads_first else (rows, num_kv_heads, num_splits)
    return grid, heads_first


def paged_decode_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seqlens_k: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    num_splits: int = 1,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    max_registers: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i's query `[rows, heads, head_dim]` attends to the first `seqlens_k[i]` tokens of the blocks in
    `block_tables[i]` (caches `[num_blocks, block_size, kv_heads, head_dim]`, in the queries' dtype or fp8),
    each row's KV in `num_splits` parts (a power of two) read by programs of their own, `block_n` KV tokens a
    loop iteration (by default what `tile_tokens` picks), the launch's warps and stages by default
    `warps_and_stages`' and its registers a thread `MAX_REGISTERS`. Returns the output and the natural-log
    log-sum-exp `[rows, heads]` (fp32); a row with no tokens gets zeros and -inf."""
    rows, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    block_n = block_n or tile_tokens(rows, num_kv_heads, num_splits)
    default_warps, default_stages = warps_and_stages(k_cache.dtype == torch.float8_e4m3fn, block_n)
    assert query.stride(-1) == 1 and block_tables.stride(-1) == 1
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    assert block_size % block_n == 0 and head_dim == triton.next_power_of_2(head_dim)
    assert num_splits >= 1 and num_splits == triton.next_power_of_2(num_splits)
    group = num_heads // num_kv_heads
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    lse = torch.empty((rows, num_heads), dtype=torch.float32, device=query.device)
    split_out, split_lse = out, lse
    if num_splits > 1:
        split_out = query.new_empty((num_splits, *query.shape), dtype=torch.float32)
        split_lse = lse.new_empty((num_splits, rows, num_heads))
    grid, heads_first = decode_grid(rows, num_kv_heads, num_splits)
    _paged_decode_kernel[grid](
        query,
        k_cache,
        v_cache,
        block_tables,
        seqlens_k,
        split_out,
        split_lse,
        query.stride(0),
        query.stride(1),
        split_out.stride(-3),
        split_out.stride(-2),
        block_tables.stride(0),
        scale,
        BLOCK_SIZE=block_size,
        NUM_KV_HEADS=num_kv_heads,
        GROUP=group,
        GROUP_ROWS=max(MIN_QUERY_ROWS, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_N=block_n,
        NUM_SPLITS=num_splits,
        DOT_DTYPE=dot_dtype(query.dtype, k_cache.dtype),
        STAGED_FP8_VALUES=STAGE_FP8_VALUES and v_cache.dtype == torch.float8_e4m3fn,
        FP8_PAIRS=FP8_ELEMENT_PAIRS and k_cache.dtype == torch.float8_e4m3fn,
        IN_PTX=not INTERPRETED,
        HEADS_FIRST=heads_first,
        num_warps=num_warps or default_warps,
        num_stages=num_stages or default_stages,
        **register_budget(max_registers or MAX_REGISTERS),
        **pdl_launch(query.device),
    )
    if num_splits > 1:
        _combine_splits_kernel[(rows, num_heads)](
            split_out,
            split_lse,
            out,
            lse,
            out.stride(0),
            out.stride(1),
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            NUM_SPLITS=num_splits,
            **pdl_launch(query.device),
        )
    return out, lse
