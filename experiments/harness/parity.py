"""How two greedy generations of the same model are told apart from a wrong model: where they part, and
whether that token is a near-tie. Computed in lower precision (bf16, fp8 weights, another reduction order)
greedy paths part where the best two tokens are closer than the rounding, which is no error; the oracle is
the model in fp32: at the parting, the two tokens' fp32 logits must be within the noise the lower
precision puts on the logits (the largest distance of its logits, or log-probabilities, from fp32's)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def parting(a: list[int], b: list[int]) -> int | None:
    """The first index where two generations differ (None: they agree over the shorter one)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def precision_noise(ours: torch.Tensor, fp32: torch.Tensor) -> float:
    """How far a lower-precision computation put its logits (or log-probabilities) from fp32's: the largest
    difference."""
    return (ours.float() - fp32.float()).abs().max().item()


def margin_noise(ours: torch.Tensor, fp32: torch.Tensor) -> float:
    """How far a lower-precision computation moved any token's logit relative to fp32's best token at each
    position (`ours`, `fp32`: [..., vocab]): the largest change of a margin `logit[t] - logit[best]`. A
    greedy token parts from fp32's best exactly when such a margin changes sign, so this, not one logit's
    own shift, is the noise a parting is judged by: two logits moving in opposite directions move their
    margin by up to twice the largest shift of either, and a shift common to all logits moves none."""
    best = fp32.argmax(-1, keepdim=True)

    def margins(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        return logits - logits.gather(-1, best)

    return (margins(ours) - margins(fp32)).abs().max().item()


def fp32_gap(fp32_logits: torch.Tensor, token: int, other: int) -> float:
    """How far apart the fp32 model puts two tokens (`fp32_logits`: one position's, over the vocabulary)."""
    return (fp32_logits[token] - fp32_logits[other]).abs().item()


def is_near_tie(fp32_logits: torch.Tensor, token: int, other: int, noise: float) -> bool:
    """Whether choosing `token` or `other` at this position is within the rounding `noise`."""
    return fp32_gap(fp32_logits, token, other) <= noise


def nudged_embeddings(model: torch.nn.Module, seed: int) -> torch.utils.hooks.RemovableHandle:
    """A forward hook on a transformers model's input embeddings that moves each element of their output by
    at most one bf16 rounding step (times 1 + u, u uniform in ±2⁻⁸, seeded); seed 0 leaves it as it is. Runs
    under it are further samples of how bf16 rounding moves the logits (`sampled_margin_noise`)."""
    if seed == 0:
        return model.get_input_embeddings().register_forward_hook(lambda _module, _args, out: out)
    generator = torch.Generator(model.device).manual_seed(seed)

    def hook(_module, _args, out):
        u = torch.rand(out.shape, generator=generator, device=out.device) * 2 - 1
        return (out.float() * (1 + u * 2**-8)).to(out.dtype)

    return model.get_input_embeddings().register_forward_hook(hook)


def nudged_samples(model: torch.nn.Module, samples: int, logits: Callable[[], list[torch.Tensor]]):
    """`logits()` computed `samples` times on `model`, under `nudged_embeddings` of seeds 0 (unmoved) to
    `samples - 1`: one list of its results per sample."""
    drawn = []
    for seed in range(samples):
        handle = nudged_embeddings(model, seed)
        try:
            drawn.append(logits())
        finally:
            handle.remove()
    return drawn


def sampled_margin_noise(samples: list[torch.Tensor], fp32: torch.Tensor) -> float:
    """The median of `margin_noise` over lower-precision `samples` of one position's logits. One sample is
    one draw of how rounding moves a margin: where a mixture-of-experts router is near a tie, a draw that
    keeps the router's choice moves it far less than one that flips it, and the engine's own run is
    another draw. The median is the typical shift there, not the largest."""
    return torch.tensor([margin_noise(sample, fp32) for sample in samples]).median().item()
