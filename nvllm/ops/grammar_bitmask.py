"""The grammar's packed token bitmask applied to a batch's logits as one Triton kernel: each row's logits
converted to fp32, and in the rows under a grammar the tokens whose bit is clear set to -inf. The torch
version of the same (`nvllm.sampling.grammar_masks`) reads and writes the whole `[rows, vocab]` fp32 array
several times (copy, gather, unpack, fill, scatter); this reads the logits and the bits once."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048  # tokens per program


@triton.jit
def _masked_logits_kernel(
    logits_ptr, out_ptr, words_ptr, mask_rows_ptr, vocab, logits_stride, words_stride, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    tokens = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = tokens < vocab
    x = tl.load(logits_ptr + row * logits_stride + tokens, mask=inside, other=0.0).to(tl.float32)
    mask_row = tl.load(mask_rows_ptr + row).to(tl.int64)
    if mask_row >= 0:
        words = tl.load(words_ptr + mask_row * words_stride + tokens // 32, mask=inside, other=0)
        allowed = ((words >> (tokens % 32)) & 1) != 0
        x = tl.where(allowed, x, float("-inf"))
    tl.store(out_ptr + row * vocab + tokens, x, mask=inside)


def masked_logits(logits: torch.Tensor, words: torch.Tensor, mask_rows: torch.Tensor) -> torch.Tensor:
    """fp32 `[rows, vocab]` logits where row r's tokens with a clear bit in `words[mask_rows[r]]` (int32, bit
    j of word i: token 32 i + j) are -inf; rows with `mask_rows[r] = -1` are only converted."""
    rows, vocab = logits.shape
    assert logits.stride(1) == 1 and words.stride(1) == 1
    out = torch.empty((rows, vocab), dtype=torch.float32, device=logits.device)
    if rows:
        _masked_logits_kernel[(rows, triton.cdiv(vocab, BLOCK))](
            logits, out, words, mask_rows, vocab, logits.stride(0), words.stride(0), BLOCK=BLOCK, num_warps=8
        )
    return out
