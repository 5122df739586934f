"""Token rates, as the engine's statistics, its progress bar and the experiments report them."""

from __future__ import annotations


def tokens_per_second(num_tokens: int, seconds: float) -> float:
    """The rate of `num_tokens` over `seconds`, 0 for no time."""
    return num_tokens / seconds if seconds > 0 else 0.0
