"""The grammar's token bitmask, applied on the device at every step of a batch to the rows whose requests ask
for structured outputs, before the rest of the sampling (penalties, temperature, top-k/top-p); the other rows
are untouched. The matchers live on the host, so each step's mask needs the step before's tokens there: the
constrained rows' tokens are read back after every step and fed to their matchers before the next step's mask
is filled. Rounds stay several steps long: this wait per step was cheaper on the CPU than rounds of one step
(experiments/results/2026-12-02-cpu-grammar-engines.md).

On CUDA the wait is not where the device idles: `accept` only starts the tokens' copy to pinned host memory,
and the matchers consume them in the next step's `masked` (or in `settle`, at the round's end). The next
step's forward needs only the device's tokens, so the model runner has launched it by then: the host reads
the tokens, advances the matchers and fills the next mask while that forward runs.

The rows' masks are filled in parallel by llguidance's thread pool, and go to the device packed (a bit a
token, one thirtieth of the bytes of a boolean mask), to be applied there: on CUDA by one kernel
(`nvllm.ops.grammar_bitmask`), elsewhere unpacked by torch."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from nvllm.sampling.grammar_compiler import GrammarState, import_llguidance
from nvllm.scheduler.sequence import Sequence
from nvllm.transfer import to_device

BITS = torch.arange(32, dtype=torch.int32)  # a word's bits, for the unpacking on the CPU


@functools.cache
def mask_executor():
    """llguidance's thread pool, which fills many rows' masks at once (one per process)."""
    return import_llguidance().LLExecutor()


class GrammarMasks:
    """The constrained rows `rows` of a batch (indices into its sampled rows) and their samples' states;
    `num_steps`: per constrained row, the steps of the decode round it takes (None: a prefill's one);
    `wait_for_device`: how the host waits for a CUDA event (the model runner's)."""

    def __init__(
        self,
        rows: list[int],
        states: list[GrammarState],
        num_steps: list[int] | None,
        device,
        wait_for_device: Callable[[torch.cuda.Event], None] | None = None,
    ):
        self.rows, self.states, self.num_steps = rows, states, num_steps
        self.device_rows = to_device(torch.tensor(rows), device)
        self.llguidance_torch = import_llguidance().torch
        self.bitmask = self.llguidance_torch.allocate_token_bitmask(len(rows), states[0].mask_width)
        if self.device_rows.is_cuda:
            self.bitmask = self.bitmask.pin_memory()  # copied to the device without a stop
            self.host_tokens = torch.empty(len(rows), dtype=torch.int64, pin_memory=True)
        self.mask_rows: torch.Tensor | None = None  # see `_mask_rows`
        self.wait_for_device = wait_for_device or torch.cuda.Event.synchronize
        # a step whose tokens are on their way to `host_tokens` (None: none), and the event after their copy
        self.copying_step: int | None = None
        self.copied: torch.cuda.Event | None = None

    def masked(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """float32 logits with the tokens each constrained row's grammar forbids at -inf (a copy: the
        model's logits may be a CUDA graph's output buffer)."""
        self.settle()  # the step before's tokens, whose copy `accept` started, reach their matchers first
        pending = [(state.matcher, index) for index, state in enumerate(self.states) if state.end_len is None]
        if pending:  # every row's grammar may have ended within the round
            self.llguidance_torch.fill_next_token_bitmask_par(mask_executor(), pending, self.bitmask)
        # the copy is done before the host writes the bitmask again: the next step's `settle` waits for an
        # event recorded after this step's sampling, which follows this copy on the stream
        words = self.bitmask.to(logits.device, non_blocking=True)
        if logits.is_cuda:
            from nvllm.ops.grammar_bitmask import masked_logits

            return masked_logits(logits, words, self._mask_rows(logits.shape[0], logits.device))
        vocab_size = logits.shape[1]
        allowed = ((words.unsqueeze(-1) >> BITS) & 1).view(len(self.rows), -1)[:, :vocab_size].bool()
        masked = logits.to(torch.float32, copy=True)
        rows = masked[self.device_rows]
        masked[self.device_rows] = rows.masked_fill(~allowed, float("-inf"))
        return masked

    def _mask_rows(self, num_rows: int, device) -> torch.Tensor:
        """Per row of the logits, its row of the bitmask, or -1 (a free row); made once per batch."""
        if self.mask_rows is None:
            mask_rows = torch.full((num_rows,), -1, dtype=torch.int32)
            mask_rows[self.rows] = torch.arange(len(self.rows), dtype=torch.int32)
            self.mask_rows = to_device(mask_rows, device)
        return self.mask_rows

    def accept(self, tokens: torch.Tensor, step: int) -> None:
        """Feed each constrained row's token of step `step` to its matcher (a row sitting it out has none):
        at once on the CPU; on CUDA start their copy to the host, consumed by `settle`."""
        sampled = tokens[self.device_rows]
        if not sampled.is_cuda:
            self._consume(sampled.tolist(), step)
            return
        # `host_tokens` is free: the step before's tokens were consumed by this step's `masked`
        self.host_tokens.copy_(sampled, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record()
        self.copying_step = step

    def settle(self) -> None:
        """Wait for the tokens `accept` started copying, if any, and feed them to their matchers: the next
        step's `masked` calls this, and the model runner at the end of a batch, before anyone reads the
        matchers (the scheduler's stops, the next batch's masks)."""
        if self.copying_step is None:
            return
        self.wait_for_device(self.copied)
        step, self.copying_step = self.copying_step, None
        self._consume(self.host_tokens.tolist(), step)

    def _consume(self, sampled: list[int], step: int) -> None:
        for index, (state, token) in enumerate(zip(self.states, sampled)):
            if self.num_steps is None or step < self.num_steps[index]:
                state.consume(token)


def grammar_masks(
    seqs: list[Sequence],
    num_steps: list[int] | None,
    device,
    wait_for_device: Callable[[torch.cuda.Event], None] | None = None,
) -> GrammarMasks | None:
    """For the sampled sequences `seqs` of a batch (a decode round's `num_steps` per sequence, or a prefill:
    None); None when none asks for structured outputs. `wait_for_device`: see `GrammarMasks`."""
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
    return GrammarMasks(rows, [seqs[row].grammar for row in rows], steps, device, wait_for_device)
