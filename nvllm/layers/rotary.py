import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Rotary position embedding in the rotate-half layout (Qwen3's), with cos/sin precomputed for every
    position up to the model's maximum so a step is one gather."""

    def __init__(self, head_dim: int, max_position: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        freqs = torch.outer(torch.arange(max_position, dtype=torch.float), inv_freq)
        self.register_buffer("cos_sin", torch.cat([freqs.cos(), freqs.sin()], dim=-1), persistent=False)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor):
        """query/key: [num_tokens, num_heads, head_dim]."""
        cos, sin = self.cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)
        return self._rotate(query, cos, sin), self._rotate(key, cos, sin)
