"""What a request adds to its logits at every step, the same at each: `logit_bias`, and -inf outside its
`allowed_token_ids` and on its bad words of one token. One dense row per such request, built on the device
from the requests' token ids once per batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvllm.sampling.bad_words import single_token_words
from nvllm.sampling_params import SamplingParams
from nvllm.transfer import to_device


@dataclass
class LogitBias:
    rows: torch.Tensor  # [R] logits rows
    bias: torch.Tensor  # [R, vocab] float32, -inf where a token may not be sampled

    def apply(self, logits: torch.Tensor) -> None:
        logits[self.rows] += self.bias


def logit_bias(params: list[SamplingParams], vocab_size: int, device) -> LogitBias | None:
    """For the rows of `params` that bias or filter tokens (None: no row does)."""
    rows = [
        row for row, p in enumerate(params) if p.logit_bias or p.allowed_token_ids or single_token_words(p)
    ]
    if not rows:
        return None
    restricted, allowed, banned, biased, biases = [], ([], []), ([], []), ([], []), []
    for index, row in enumerate(rows):
        p = params[row]
        if p.allowed_token_ids:
            restricted.append(index)
            allowed[0].extend([index] * len(p.allowed_token_ids))
            allowed[1].extend(p.allowed_token_ids)
        banned_tokens = single_token_words(p)
        banned[0].extend([index] * len(banned_tokens))
        banned[1].extend(banned_tokens)
        for token, value in (p.logit_bias or {}).items():
            biased[0].append(index)
            biased[1].append(token)
            biases.append(value)

    def on_device(values: list, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return to_device(torch.tensor(values, dtype=dtype), device)

    bias = torch.zeros(len(rows), vocab_size, dtype=torch.float32, device=device)
    # the order of vLLM: allowed tokens and bad words mask, then the bias adds (-inf stays -inf)
    bias[on_device(restricted)] = float("-inf")
    bias[on_device(allowed[0]), on_device(allowed[1])] = 0.0
    bias[on_device(banned[0]), on_device(banned[1])] = float("-inf")
    biased_at = (on_device(biased[0]), on_device(biased[1]))
    bias.index_put_(biased_at, on_device(biases, torch.float32), accumulate=True)
    return LogitBias(rows=on_device(rows), bias=bias)
