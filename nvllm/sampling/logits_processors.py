"""What some requests ask of the sampler beyond temperature/top-k/top-p: repetition, presence and frequency
penalties, `min_tokens`, `min_p`, logit biases, allowed tokens, bad words, and log-probabilities. Built only
for a batch with a request that asks
(`RequestProcessing`), so that the other batches' sampling is untouched.

All of it runs on the device at every step of a decode round, so that rounds stay several steps long and
overlapped: the token history that penalties need lives on the device (`Penalties.seen`/`counts`, updated
with each step's tokens), and `min_tokens` needs only how many tokens each row had at the round's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nvllm.sampling.bad_words import BadWords
from nvllm.sampling.logit_bias import LogitBias


@dataclass
class Penalties:
    """vLLM's definitions, applied to the raw logits of rows `rows`: a logit of a token that the prompt or
    the output holds is divided by `repetition` when positive, multiplied by it otherwise; then
    `frequency` times the token's count in the output and `presence` (if it occurs there) are subtracted."""

    rows: torch.Tensor  # [P] logits rows
    seen: torch.Tensor  # [P, vocab] bool: the prompt or the output holds the token
    counts: torch.Tensor  # [P, vocab] float32: times the output holds it
    presence: torch.Tensor  # [P]
    frequency: torch.Tensor  # [P]
    repetition: torch.Tensor  # [P]

    def apply(self, logits: torch.Tensor) -> None:
        rows = logits[self.rows]
        repetition = torch.where(self.seen, self.repetition.unsqueeze(1), 1.0)
        rows = torch.where(rows > 0, rows / repetition, rows * repetition)
        rows = rows - self.frequency.unsqueeze(1) * self.counts
        rows = rows - self.presence.unsqueeze(1) * (self.counts > 0)
        logits[self.rows] = rows

    def update(self, tokens: torch.Tensor, takes_step: torch.Tensor) -> None:
        """Count each row's sampled token (rows that sit the step out, `takes_step` False, sampled none)."""
        index = (torch.arange(self.rows.shape[0], device=tokens.device), tokens[self.rows])
        self.counts.index_put_(index, takes_step.float(), accumulate=True)
        self.seen.index_put_(index, self.seen[index] | takes_step)


@dataclass
class MinTokens:
    """Rows `rows` may not sample their `stop_ids` (EOS and `stop_token_ids`) while they have fewer than
    `min_tokens` output tokens: at step `s` of the round, while `s < tokens_before_stop`."""

    rows: torch.Tensor  # [M]
    stop_ids: torch.Tensor  # [M, S], rows with fewer ids repeat one
    tokens_before_stop: torch.Tensor  # [M]

    def apply(self, logits: torch.Tensor, step: int) -> None:
        rows = logits[self.rows]
        blocked = (step < self.tokens_before_stop).unsqueeze(1).expand_as(self.stop_ids)
        suppressed = torch.where(blocked, float("-inf"), rows.gather(1, self.stop_ids))
        logits[self.rows] = rows.scatter(1, self.stop_ids, suppressed)


@dataclass
class MinP:
    """Rows `rows` drop the tokens whose probability after temperature is below `min_p` times that of their
    likeliest token (after temperature and before top-k/top-p, as vLLM applies it)."""

    rows: torch.Tensor  # [M]
    min_p: torch.Tensor  # [M]
    inv_temperatures: torch.Tensor  # [M]

    def apply(self, logits: torch.Tensor) -> None:
        rows = logits[self.rows]
        probs = (rows * self.inv_temperatures.unsqueeze(1)).softmax(-1)
        kept = probs >= self.min_p.unsqueeze(1) * probs.amax(-1, keepdim=True)
        logits[self.rows] = rows.masked_fill(~kept, float("-inf"))


@dataclass
class Logprobs:
    """Log-probabilities of the raw logits (before penalties, temperature, top-k/top-p, as vLLM reports by
    default): per step, every row's top `num_top` tokens and the sampled token's."""

    num_top: int
    steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def record(self, logprobs: torch.Tensor, tokens: torch.Tensor) -> None:
        top_values, top_ids = logprobs.topk(self.num_top, dim=-1) if self.num_top else (None, None)
        sampled = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
        if top_values is None:
            top_values = top_ids = torch.empty(logprobs.shape[0], 0, device=logprobs.device)
        self.steps.append((top_values, top_ids.long(), sampled))


@dataclass
class RequestProcessing:
    """The processing a batch's requests ask for; each part None when none asks for it."""

    penalties: Penalties | None
    min_tokens: MinTokens | None
    logprobs: Logprobs | None
    num_steps: torch.Tensor | None  # [P] a decode round's steps per penalised row (None: one step)
    logit_bias: LogitBias | None = None
    bad_words: BadWords | None = None
    bad_words_num_steps: torch.Tensor | None = None  # [B] as num_steps, per row with bad words
    min_p: MinP | None = None

    def processed(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """The logits to sample from, in vLLM's order: allowed tokens, bad words and biases, penalties and
        min_tokens; then min_p, which reads the temperature that the draw applies next."""
        changers = (self.logit_bias, self.bad_words, self.penalties, self.min_tokens, self.min_p)
        if all(changer is None for changer in changers):
            return logits
        logits = logits.float().clone()  # the model's logits may be a CUDA graph's output buffer
        if self.logit_bias is not None:
            self.logit_bias.apply(logits)
        if self.bad_words is not None:
            self.bad_words.apply(logits)
        if self.penalties is not None:
            self.penalties.apply(logits)
        if self.min_tokens is not None:
            self.min_tokens.apply(logits, step)
        if self.min_p is not None:
            self.min_p.apply(logits)
        return logits

    def sampled(self, tokens: torch.Tensor, step: int, raw_logits: torch.Tensor) -> None:
        if self.logprobs is not None:
            self.logprobs.record(raw_logits.float().log_softmax(-1), tokens)
        if self.penalties is not None:
            self.penalties.update(tokens, _takes_step(self.penalties.rows, self.num_steps, step))
        if self.bad_words is not None:
            self.bad_words.update(tokens, _takes_step(self.bad_words.rows, self.bad_words_num_steps, step))


def _takes_step(rows: torch.Tensor, num_steps: torch.Tensor | None, step: int) -> torch.Tensor:
    """Which of `rows` sample at `step` of a decode round (each takes `num_steps`; None: a prefill's one)."""
    if num_steps is None:
        return torch.ones_like(rows, dtype=torch.bool)
    return step < num_steps
