"""RoPE's rotation itself, which the torch reference of `nvllm::qk_norm_rope_store` applies (the layers hold
the frequencies, `nvllm.layers.rotary`)."""

import torch


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE in the rotate-half layout over the last dimension, in fp32, rounded to x's dtype."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)
