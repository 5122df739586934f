from dataclasses import dataclass


@dataclass
class SamplingParams:
    """How one request samples. temperature=0 is greedy; top_k=-1 and top_p=1 disable those filters."""

    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
    top_k: int = -1
    top_p: float = 1.0
    seed: int | None = None  # a per-request seed makes this request's samples reproducible

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens!r} must be an integer >= 1")
        if not self.temperature >= 0:  # also rejects NaN, which would sample garbage
            raise ValueError(f"temperature={self.temperature} must be >= 0 (0 means greedy)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        if not isinstance(self.top_k, int) or self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k={self.top_k} must be -1 (disabled) or an integer >= 1")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0
