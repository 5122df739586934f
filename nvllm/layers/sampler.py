from __future__ import annotations

import torch

from nvllm.sampling_params import SamplingParams


class Sampler:
    """Greedy rows take the argmax; the others sample from softmax(logits / T), restricted by top-k/top-p.

    Sampling is the exponential race: argmax of p / E with E ~ Exp(1), i.e. of logits - log E (no softmax
    needed), which equals a categorical draw and lets a row with its own seed draw its noise from its own
    generator while the rest share one call.
    """

    def __call__(
        self, logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
    ) -> list[int]:
        logits = logits.float()
        if all(p.is_greedy for p in params):  # decided on the host: no device sync before sampling
            return logits.argmax(-1).tolist()
        greedy = torch.tensor([p.is_greedy for p in params]).to(logits.device, non_blocking=True)
        temperatures = torch.tensor([p.temperature or 1.0 for p in params]).to(
            logits.device, non_blocking=True
        )
        logits = logits / temperatures.unsqueeze(1)
        if any(p.top_k > 0 or p.top_p < 1 for p in params):
            logits = self._filter_top_k_top_p(logits, params)
        noise = torch.empty_like(logits).exponential_()
        for row, generator in enumerate(generators):
            if generator is not None:  # reproducible per request, whatever else shares the batch
                noise[row] = torch.empty(logits.shape[1]).exponential_(generator=generator).to(noise.device)
        # an exact 0 (possible in float32) would give +inf, and NaN next to a filtered -inf logit
        sampled = (logits - noise.clamp_min_(torch.finfo(noise.dtype).tiny).log()).argmax(-1)
        return torch.where(greedy, logits.argmax(-1), sampled).tolist()

    @staticmethod
    def _filter_top_k_top_p(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        vocab_size = logits.shape[1]
        top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab_size for p in params], device=logits.device)
        top_p = torch.tensor([p.top_p for p in params], device=logits.device)
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab_size, device=logits.device).unsqueeze(0)
        sorted_probs = sorted_logits.softmax(-1)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # keeps the first token that crosses top_p
        drop = (ranks >= top_k.unsqueeze(1)) | (mass_before >= top_p.unsqueeze(1))
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        return torch.empty_like(logits).scatter_(1, order, sorted_logits)
