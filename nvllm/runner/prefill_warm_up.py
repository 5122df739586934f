"""Start-up's prefill warm-up: the prefill step sizes a runner runs once before serving, so that the Triton
kernels a prefill launches are compiled at start-up rather than inside a user's first long prompts.

Triton compiles a kernel the first time a launch shape comes, and some launch shapes follow a step's token
count (a MoE's expert matmuls take one per band of tokens an expert, `nvllm.ops.moe_tiles`); it compiles
again the first time an integer argument is not a multiple of 16 where it was (it specializes on that). The
decode graphs' capture meets every decode batch and the prefill graphs' every small prefill, but a prefill
the graphs do not hold runs at its own token count: on a fresh engine its first prompts of a few thousand
tokens waited seconds on those compiles (experiments/results/2026-12-06-h100-engine-prefill-warm-up.md)."""

from __future__ import annotations

# `compile.prefill_warm_up`: auto (where the model is compiled on CUDA), on, off. An eager model's start-up
# stays short, as it is asked to be: its decode batches compile Triton's kernels as they come, having no
# graphs captured at start-up, so a prefill warm-up alone would not spare its first requests those compiles.
MODES = ("auto", "on", "off")

# The prefill steps' token counts the warm-up runs, capped at a step's token budget; each also a token
# shorter, odd (`prefill_warm_up_tokens`). Every power of two from 8: the MoE matmuls change launch shape
# where a step's mean pairs an expert crosses a band's edge (`nvllm.ops.moe_tiles`), at powers of two of
# its tokens wherever a model's experts are a power of two times its experts a token (Qwen3-30B-A3B's and
# Qwen3-235B-A22B's 128 and 8), and the experts quantize their activations from a power of two of tokens
# (`nvllm.ops.moe_ops.FP8_ACTIVATIONS_MIN_TOKENS`). The prefill graphs' capture meets some of these too,
# but not an eager model's.
PREFILL_WARM_UP_TOKENS = tuple(2**exponent for exponent in range(3, 16))


def resolved_mode(mode: str, on_cuda: bool, compiled: bool) -> str:
    """`compile.prefill_warm_up` settled: auto is on where the model is `compiled` on CUDA, else off."""
    return ("on" if on_cuda and compiled else "off") if mode == "auto" else mode


def prefill_warm_up_tokens(max_num_batched_tokens: int) -> list[int]:
    """The token counts of the warm-up's prefill steps within a step's budget, smallest first."""
    capped = {min(tokens, max_num_batched_tokens) for tokens in PREFILL_WARM_UP_TOKENS}
    return sorted(tokens for tokens in capped | {tokens - 1 for tokens in capped} if tokens > 0)
