"""The router settings the routing kernels' interpreter tests (tests/ops/test_moe_routing.py) combine, and
the logits of each kind: random, or a few values only, so that many experts tie within a row and rows tie
too."""

from __future__ import annotations

import itertools

import torch

# (dtype, renormalize, logits kind, padded)
COMBINATIONS = list(
    itertools.product((torch.float32, torch.bfloat16), (True, False), ("random", "ties"), (False, True))
)


def router_logits(
    tokens: int, experts: int, dtype: torch.dtype, kind: str, generator: torch.Generator
) -> torch.Tensor:
    if kind == "ties":
        return torch.randint(0, 3, (tokens, experts), generator=generator).to(dtype)
    return (2 * torch.randn(tokens, experts, generator=generator)).to(dtype)
