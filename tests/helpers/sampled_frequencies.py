"""Draws against the distribution they should follow: each token's frequency within a few standard errors of
its probability."""

from __future__ import annotations

import math

import torch


def assert_follows(draws: torch.Tensor, probs: list[float], deviations: float = 5.0) -> None:
    """Each token's frequency within `deviations` standard errors of its probability (a zero stays exactly
    zero)."""
    freqs = torch.bincount(draws.cpu(), minlength=len(probs)).double() / len(draws)
    for token, (freq, prob) in enumerate(zip(freqs.tolist(), probs, strict=True)):
        tolerance = deviations * math.sqrt(prob * (1 - prob) / len(draws))
        assert abs(freq - prob) <= tolerance, f"token {token}: frequency {freq:.4f}, probability {prob:.4f}"
