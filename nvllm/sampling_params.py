from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass

# Temperatures below this sample greedily: dividing logits by a smaller one overflows float32 (a logit of 40
# over 1e-38 is past 3.4e38), and the draw is the argmax anyway. vLLM uses the same threshold.
GREEDY_BELOW_TEMPERATURE = 1e-5
MAX_SEED = 2**64  # torch.Generator.manual_seed takes [0, 2**64)
MAX_TOP_K = 2**31 - 1


def is_integer(value: object) -> bool:
    """An integer as the engine takes one: Python or NumPy, but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass
class SamplingParams:
    """How one request samples. temperature=0 (or below GREEDY_BELOW_TEMPERATURE) is greedy; top_k=-1 and
    top_p=1 disable those filters. Every field is checked when it is built and again when it is submitted."""

    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
    top_k: int = -1
    top_p: float = 1.0
    seed: int | None = None  # a per-request seed makes this request's samples reproducible

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise a ValueError naming the first field that is wrong; then hold the numbers as Python's (NumPy
        scalars overflow in the engine's arithmetic, an np.int32 max_tokens plus a prompt's length, and
        torch.Generator.manual_seed refuses them). The values do not change."""
        if not is_integer(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens!r} must be an integer >= 1")
        if not is_real(self.temperature) or not 0 <= self.temperature <= sys.float_info.max:  # NaN too
            raise ValueError(
                f"temperature={self.temperature!r} must be a finite number >= 0 (0 means greedy)"
            )
        if not is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p!r} must be a number in (0, 1]")
        if not is_integer(self.top_k) or self.top_k == 0 or not -1 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k={self.top_k!r} must be -1 (disabled) or an integer in [1, {MAX_TOP_K}]")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos={self.ignore_eos!r} must be True or False")
        if self.seed is not None and (not is_integer(self.seed) or not 0 <= self.seed < MAX_SEED):
            raise ValueError(f"seed={self.seed!r} must be None or an integer in [0, 2**64)")
        self.max_tokens, self.top_k = int(self.max_tokens), int(self.top_k)
        self.temperature, self.top_p = float(self.temperature), float(self.top_p)
        self.seed = None if self.seed is None else int(self.seed)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE
