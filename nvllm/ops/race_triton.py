"""The sampler's exponential race (`nvllm.sampling.sampler.race`) as Triton kernels that draw the noise as
they read the logits. The torch race reads a `[rows, vocab]` fp32 tensor of Exp(1) noise that an
`exponential_` kernel wrote just before: at 256 rows of Qwen3's 151,936 logits, 155 MB written and read
again besides the logits' 78 MB. Here each element's uniform number comes from Philox (`tl.rand4x`, four
numbers a counter) inside the pass over the logits, and nothing but the logits is read.

The race is the same: a row's token is the first index of the largest `logits / T - s * log(E)`, E = -log(U)
with U uniform in (0, 1] and E held at least `TINY` (as the torch race clamps its noise), s = 0 for greedy
rows. A first kernel takes each chunk of a row to its best (score, index); a second takes each row's chunks
to its token. The numbers differ from the torch race's (another generator); the distribution does not."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from nvllm.ops.triton_interpreter import INTERPRETED

BLOCK = 1024  # logits a lane group reads per Philox call: a tile is 4 * BLOCK logits
TILE = 4 * BLOCK
NUM_WARPS = 4
# Programs the first kernel aims for: a few waves of the H200's 132 SMs, so that a batch of a few rows spreads
# its vocabulary over the GPU and a batch of hundreds takes each row in one or a few chunks
TARGET_PROGRAMS = 512
TINY = torch.finfo(torch.float32).tiny


@triton.jit
def _log2(x, FAST: tl.constexpr):
    if FAST:
        return libdevice.fast_log2f(x)  # the SFU's approximation: one instruction, not a polynomial
    else:
        return tl.log2(x)


@triton.jit
def _race_quarter(
    logits_ptr,
    tokens,
    vocab,
    u,
    inv_temperature,
    noise_weight,
    best,
    best_token,
    TINY_NOISE: tl.constexpr,
    FAST_LOG: tl.constexpr,
):
    """The lanes' bests once `tokens` (a lane each, increasing from call to call) race with uniforms `u`."""
    inside = tokens < vocab
    logits = tl.load(logits_ptr + tokens, mask=inside, other=float("-inf"))
    # -log(E) with E = -ln(1 - u) = -ln 2 * log2(1 - u): -ln 2 * log2(-log2(1 - u)) less ln(ln 2), which is
    # the same for every token of a row and left out. u in [0, 1): 1 - u in (0, 1], the noise finite
    noise = tl.maximum(-_log2(1.0 - u, FAST_LOG), TINY_NOISE)
    scores = logits.to(tl.float32) * inv_temperature - noise_weight * _log2(noise, FAST_LOG)
    scores = tl.where(inside, scores, float("-inf"))
    better = scores > best  # strictly: a lane keeps the first index of its largest score
    return tl.where(better, scores, best), tl.where(better, tokens, best_token)


# chunk_len, a multiple of the tile, is specialized (as divisible by 16) for aligned vector loads
@triton.jit(do_not_specialize=["seed", "num_chunks"])
def _race_chunks_kernel(
    logits_ptr,
    logits_stride,
    inv_temperatures_ptr,
    noise_scales_ptr,
    best_scores_ptr,
    best_tokens_ptr,
    vocab,
    seed,
    chunk_len,
    num_chunks,
    BLOCK: tl.constexpr,
    TINY_NOISE: tl.constexpr,
    FAST_LOG: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    row_logits = logits_ptr + row * logits_stride
    inv_temperature = tl.load(inv_temperatures_ptr + row)
    noise_weight = tl.load(noise_scales_ptr + row) * 0.6931471805599453  # ln 2: from log2 to ln
    lanes = tl.arange(0, BLOCK)
    first = chunk * chunk_len
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    best_token = tl.full((BLOCK,), 0, tl.int32) + first
    # one Philox counter per (row, tile, lane), unique over the batch; its four numbers serve the lane's
    # four logits of the tile
    row_counters = row * (num_chunks * chunk_len // 4)
    for tile in range(first, first + chunk_len, 4 * BLOCK):
        counters = (row_counters + tile // 4 + lanes).to(tl.uint32)
        uniforms = tl.rand4x(seed, counters)
        for quarter in tl.static_range(4):
            best, best_token = _race_quarter(
                row_logits,
                tile + quarter * BLOCK + lanes,
                vocab,
                uniforms[quarter],
                inv_temperature,
                noise_weight,
                best,
                best_token,
                TINY_NOISE,
                FAST_LOG,
            )
    chunk_best = tl.max(best, 0)
    chunk_token = tl.min(tl.where(best == chunk_best, best_token, 2147483647), 0)
    tl.store(best_scores_ptr + row * num_chunks + chunk, chunk_best)
    tl.store(best_tokens_ptr + row * num_chunks + chunk, chunk_token)


@triton.jit(do_not_specialize=["num_chunks"])
def _race_rows_kernel(best_scores_ptr, best_tokens_ptr, tokens_ptr, num_chunks, CHUNKS_POW2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunks = tl.arange(0, CHUNKS_POW2)
    real = chunks < num_chunks
    scores = tl.load(best_scores_ptr + row * num_chunks + chunks, mask=real, other=float("-inf"))
    tokens = tl.load(best_tokens_ptr + row * num_chunks + chunks, mask=real, other=2147483647)
    best = tl.max(scores, 0)
    # the first chunk's first token wins a tie (a row of only -inf scores: token 0)
    tl.store(tokens_ptr + row, tl.min(tl.where(scores == best, tokens, 2147483647), 0).to(tl.int64))


def race_chunks(num_rows: int, vocab: int) -> tuple[int, int]:
    """(chunk length, chunks per row) for a batch of `num_rows` rows: whole tiles, enough chunks for about
    `TARGET_PROGRAMS` programs in all, at least one tile each."""
    tiles = triton.cdiv(vocab, TILE)
    wanted = max(1, min(tiles, triton.cdiv(TARGET_PROGRAMS, max(num_rows, 1))))
    chunk = triton.cdiv(tiles, wanted) * TILE
    return chunk, triton.cdiv(vocab, chunk)


def race_in_kernels(
    logits: torch.Tensor, inv_temperatures: torch.Tensor, noise_scales: torch.Tensor, seed: int
) -> torch.Tensor:
    """The race's token per row (int64, on the logits' device), its noise drawn from Philox under `seed`."""
    num_rows, vocab = logits.shape
    assert logits.stride(1) == 1, "the logits' rows must be contiguous"
    chunk, num_chunks = race_chunks(num_rows, vocab)
    best_scores = torch.empty((num_rows, num_chunks), dtype=torch.float32, device=logits.device)
    best_tokens = torch.empty((num_rows, num_chunks), dtype=torch.int32, device=logits.device)
    tokens = torch.empty(num_rows, dtype=torch.int64, device=logits.device)
    if num_rows:
        _race_chunks_kernel[(num_rows, num_chunks)](
            logits,
            logits.stride(0),
            inv_temperatures,
            noise_scales,
            best_scores,
            best_tokens,
            vocab,
            seed,
            chunk,
            num_chunks,
            BLOCK=BLOCK,
            TINY_NOISE=TINY,
            FAST_LOG=not INTERPRETED,  # the interpreter has no fast log2: the precise one there
            num_warps=NUM_WARPS,
        )
        # one compiled variant for every batch size: the chunk counts are arguments, bounded by this
        most_chunks = triton.next_power_of_2(triton.cdiv(vocab, TILE))
        _race_rows_kernel[(num_rows,)](best_scores, best_tokens, tokens, num_chunks, CHUNKS_POW2=most_chunks)
    return tokens
