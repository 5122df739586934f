"""The grammar's token bitmask, applied on the device at every step of a batch to the rows whose requests ask
for structured outputs, before the rest of the sampling (penalties, temperature, top-k/top-p); the other rows
are untouched. The matchers live on the host, so each step's mask needs the step before's tokens there: the
constrained rows' tokens are read back after every step and fed to their matchers (`accept`) before the next
step's mask is filled. Rounds stay several steps long: this wait per step was cheaper on the CPU than rounds
of one step (experiments/results/2026-12-02-cpu-grammar-engines.md).

The rows' masks are filled in parallel by llguidance's thread pool, and go to the device packed (a bit a
token, one thirtieth of the bytes of a boolean mask), to be unpacked there."""

from __future__ import annotations

import functools

import torch

from nvllm.sampling.grammar_compiler import GrammarState, import_llguidance
from nvllm.scheduler.sequence import Sequence
from nvllm.transfer import to_device

BITS = torch.arange(32, dtype=torch.int32)


@functools.cache
def mask_executor():
    """llguidance's thread pool, which fills many rows' masks at once (one per process)."""
    return import_llguidance().LLExecutor()


class GrammarMasks:
    """The constrained rows `rows` of a batch (indices into its sampled rows) and their samples' states;
    `num_steps`: per constrained row, the steps of the decode round it takes (None: a prefill's one)."""

    def __init__(self, rows: list[int], states: list[GrammarState], num_steps: list[int] | None, device):
        self.rows, self.states, self.num_steps = rows, states, num_steps
        self.device_rows = to_device(torch.tensor(rows), device)
        self.llguidance_torch = import_llguidance().torch
        self.bitmask = self.llguidance_torch.allocate_token_bitmask(len(rows), states[0].mask_width)
        if self.device_rows.is_cuda:
            self.bitmask = self.bitmask.pin_memory()  # copied to the device without a stop
        self.bits = to_device(BITS, device)

    def masked(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """float32 logits with the tokens each constrained row's grammar forbids at -inf (a copy: the
        model's logits may be a CUDA graph's output buffer)."""
        pending = [(state.matcher, index) for index, state in enumerate(self.states) if state.end_len is None]
        if pending:  # every row's grammar may have ended within the round
            self.llguidance_torch.fill_next_token_bitmask_par(mask_executor(), pending, self.bitmask)
        # the copy is done before the host writes the bitmask again: `accept` waits for this step's tokens
        words = self.bitmask.to(logits.device, non_blocking=True)
        vocab_size = logits.shape[1]
        allowed = ((words.unsqueeze(-1) >> self.bits) & 1).view(len(self.rows), -1)[:, :vocab_size].bool()
        masked = logits.to(torch.float32, copy=True)
        rows = masked[self.device_rows]
        masked[self.device_rows] = rows.masked_fill(~allowed, float("-inf"))
        return masked

    def accept(self, tokens: torch.Tensor, step: int) -> None:
        """Feed each constrained row's token of step `step` to its matcher (a row sitting it out has none)."""
        sampled = tokens[self.device_rows].tolist()
        for index, (state, token) in enumerate(zip(self.states, sampled)):
            if self.num_steps is None or step < self.num_steps[index]:
                state.consume(token)


def grammar_masks(seqs: list[Sequence], num_steps: list[int] | None, device) -> GrammarMasks | None:
    """For the sampled sequences `seqs` of a batch (a decode round's `num_steps` per sequence, or a prefill:
    None); None when none asks for structured outputs."""
    rows = [row for row, seq in enumerate(seqs) if seq.grammar is not None]
    if not rows:
        return None
    for row in rows:
        seq, state = seqs[row], seqs[row].grammar
        if state.end_len is None and state.num_consumed != seq.device_len - seq.num_prompt_tokens:
            raise RuntimeError(
                f"a grammar's matcher consumed {state.num_consumed} tokens of an output that has "
                f"{seq.device_len - seq.num_prompt_tokens}"
            )
    steps = None if num_steps is None else [num_steps[row] for row in rows]
    return GrammarMasks(rows, [seqs[row].grammar for row in rows], steps, device)
