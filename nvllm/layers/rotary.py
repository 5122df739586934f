"""Rotary position embedding in the rotate-half layout (every family's here), with cos/sin precomputed for
every position up to the model's maximum so a step is one gather. Scalings: none (`default`), YaRN
(arXiv 2309.00071), which checkpoints extended past their training length use, and Llama 3.1's (`llama3`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from nvllm.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> tuple[torch.Tensor, float]:
    """Each rotary dimension pair's frequency, and the factor cos and sin are scaled by."""
    dim, base = config.head_dim, config.rope_theta
    exponents = torch.arange(0, dim, 2, dtype=torch.float) / dim
    if config.rope_scaling == "default":
        return 1.0 / base**exponents, 1.0
    if config.rope_scaling == "llama3":
        return llama3_frequencies(config, 1.0 / base**exponents), 1.0
    assert config.rope_scaling == "yarn", config.rope_scaling  # the checkpoint reader refuses others
    factor = config.rope_scaling_factor
    attention_factor = config.rope_attention_factor
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    def dimension_of(num_rotations: float) -> float:
        """The dimension that turns `num_rotations` times over the original context."""
        original = config.rope_original_max_position_embeddings
        return dim * math.log(original / (num_rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dimension_of(config.rope_beta_fast), dimension_of(config.rope_beta_slow)
    if config.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    # dimensions below `low` rotate often enough to keep their frequency (extrapolate), those above `high`
    # are interpolated (divided by the factor), and a linear ramp blends the ones between
    ramp = ((torch.arange(dim // 2, dtype=torch.float) - low) / max(high - low, 0.001)).clamp(0, 1)
    extrapolated = 1.0 / base**exponents
    return extrapolated / factor * ramp + extrapolated * (1 - ramp), attention_factor


def llama3_frequencies(config: ModelConfig, inv_freq: torch.Tensor) -> torch.Tensor:
    """Llama 3.1's scaling of the frequencies `inv_freq`: wavelengths longer than the original context over
    `rope_low_freq_factor` are divided by the factor (interpolated), those shorter than it over
    `rope_high_freq_factor` kept, and the ones between blended by where their wavelength lies."""
    factor, original = config.rope_scaling_factor, config.rope_original_max_position_embeddings
    low, high = config.rope_low_freq_factor, config.rope_high_freq_factor
    wavelengths = 2 * math.pi / inv_freq
    blend = ((original / wavelengths - low) / (high - low)).clamp(0, 1)  # 0: interpolate, 1: keep
    return inv_freq / factor * (1 - blend) + inv_freq * blend


class RotaryEmbedding(nn.Module):
    """Holds `cos_sin` `[max_positions, head_dim]`: each position's cos, then sin, of the rotary frequencies
    (`nvllm::qk_norm_rope_store` gathers and applies them)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        inv_freq, scale = inverse_frequencies(config)
        freqs = torch.outer(torch.arange(config.max_position_embeddings, dtype=torch.float), inv_freq)
        cos_sin = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * scale
        self.register_buffer("cos_sin", cos_sin, persistent=False)
