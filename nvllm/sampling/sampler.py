from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from nvllm.sampling.grammar_masks import GrammarMasks
from nvllm.sampling.logits_processors import RequestProcessing
from nvllm.sampling_params import SamplingParams
from nvllm.transfer import to_device

if TYPE_CHECKING:
    from nvllm.sampling.prompt_logprobs import PromptLogprobs

TINY = torch.finfo(torch.float32).tiny
RACE_SEEDS = 2**31 - 1  # the race kernels' Philox seeds: a 32-bit kernel argument


def race(
    logits: torch.Tensor, inv_temperatures: torch.Tensor, noise_scales: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """argmax of logits / T - log E per row: with E ~ Exp(1) a categorical draw from softmax(logits / T),
    with a noise scale of 0 the greedy choice. One pass over the logits when compiled (drawing E inside
    that pass, from inductor's random numbers, was slower than reading a tensor of it:
    experiments/results/2026-11-29-h200-overlapped-rounds.md)."""
    return _scores(logits, inv_temperatures, noise_scales, noise).argmax(-1)


def race_in_chunks(
    logits: torch.Tensor, inv_temperatures: torch.Tensor, noise_scales: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """`race` for a few rows: compiled, a row's argmax goes to one GPU program, which leaves most of the GPU
    idle for a batch of a few rows of Qwen3's 151,936 logits; in 128 chunks it spreads. Many rows are faster
    whole: a chunk of 1,187 logits is not aligned for vector loads
    (experiments/results/2026-11-29-h200-overlapped-rounds.md)."""
    return chunked_argmax(_scores(logits, inv_temperatures, noise_scales, noise))


def _scores(logits, inv_temperatures, noise_scales, noise) -> torch.Tensor:
    scores = logits.float() * inv_temperatures.unsqueeze(1)
    # an exact 0 (possible in float32) would give +inf, and NaN next to a filtered -inf logit
    return scores - noise_scales.unsqueeze(1) * noise.clamp_min(TINY).log()


def chunked_argmax(scores: torch.Tensor) -> torch.Tensor:
    """`scores.argmax(-1)` (the first maximum of each row) in two passes: over up to 128 chunks of each row,
    then over the chunks' maxima."""
    num_rows, width = scores.shape
    num_chunks = next(n for n in (128, 64, 32, 16, 8, 4, 2, 1) if width % n == 0)
    chunk_maxima, offsets = scores.view(num_rows, num_chunks, width // num_chunks).max(-1)
    best_chunk = chunk_maxima.argmax(-1, keepdim=True)
    return (best_chunk * (width // num_chunks) + offsets.gather(1, best_chunk)).squeeze(1)


@dataclass
class SamplingBatch:
    """The sampling parameters of a batch as device tensors, built once for every step that uses them."""

    seeded_rows: list[tuple[int, torch.Generator]]  # the rows with a generator of their own
    inv_temperatures: torch.Tensor
    noise_scales: torch.Tensor  # 0: greedy
    top_k: torch.Tensor | None  # None when no row filters
    top_p: torch.Tensor | None
    all_greedy: bool
    num_steps: list[int] | None  # per row, the decode steps it takes: a row sitting out draws nothing
    # penalties, min_tokens, logprobs: None unless a request of the batch asks for one
    processing: RequestProcessing | None = None
    # a prefill step's prompt log-probabilities, recorded by the runner; None unless a request asks
    step_prompt_logprobs: PromptLogprobs | None = None
    grammar_masks: GrammarMasks | None = None  # None unless a request asks for structured outputs


# `compile.sampler`: auto (compiled where the model is compiled on CUDA), on, off
COMPILE_MODES = ("auto", "on", "off")


class Sampler:
    """Greedy rows take the argmax; the others sample from softmax(logits / T), restricted by top-k/top-p.

    Sampling is the exponential race (`race`), which needs no softmax and lets a row with its own seed draw
    its noise from its own generator while the rest share one call. Nothing here waits for the device:
    `sample` returns the tokens as a device tensor, so a decode round can feed them to its next step.
    """

    CHUNKED_MAX_ROWS = 8  # batches up to this many rows race in chunks (`race_in_chunks`)

    def __init__(self, compiled: bool = False, race_kernel: bool = False):
        """`race_kernel`: batches race in Triton kernels that draw their noise as they read the logits
        (`nvllm.ops.race_triton`; on CUDA, or the CPU under Triton's interpreter) where no row filters its
        tokens or draws from a generator of its own."""
        # rows are padded to at least 2 by the caller, so one dynamic graph of each serves every batch size
        self.compiled = compiled
        self.race_kernel = race_kernel
        self._race, self._race_in_chunks = race, race_in_chunks
        if compiled:
            self._race = torch.compile(race, fullgraph=True, dynamic=True)
            self._race_in_chunks = torch.compile(race_in_chunks, fullgraph=True, dynamic=True)

    @staticmethod
    def prepare(
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
        device: torch.device | str,
        num_rows: int | None = None,
        num_steps: list[int] | None = None,
    ) -> SamplingBatch:
        """`num_rows` ≥ len(params) pads the batch with greedy rows (whose tokens the caller drops);
        `num_steps`: how many steps of a decode round each row takes."""
        num_padding = (num_rows or len(params)) - len(params)
        greedy = [p.is_greedy for p in params] + [True] * num_padding

        def on_device(values: list, dtype: torch.dtype) -> torch.Tensor:
            return to_device(torch.tensor(values, dtype=dtype), device)

        filtering = any(p.top_k > 0 or p.top_p < 1 for p in params)
        return SamplingBatch(
            seeded_rows=[(row, gen) for row, gen in enumerate(generators) if gen is not None],
            inv_temperatures=on_device(
                [1.0 if p.is_greedy else 1.0 / p.temperature for p in params] + [1.0] * num_padding,
                torch.float32,
            ),
            noise_scales=on_device([0.0 if g else 1.0 for g in greedy], torch.float32),
            top_k=on_device([p.top_k for p in params] + [0] * num_padding, torch.int64)
            if filtering
            else None,
            top_p=on_device([p.top_p for p in params] + [1.0] * num_padding, torch.float32)
            if filtering
            else None,
            all_greedy=all(greedy),
            num_steps=num_steps,
        )

    def sample(self, logits: torch.Tensor, batch: SamplingBatch, step: int = 0) -> torch.Tensor:
        """One token per row of `logits` (as many rows as the batch was prepared for), on the device;
        `step`: the step of a decode round."""
        grammar, processing = batch.grammar_masks, batch.processing
        allowed = logits if grammar is None else grammar.masked(logits, step)
        if processing is None:
            tokens = self._draw(allowed, batch, step)
        else:
            tokens = self._draw(processing.processed(allowed, step), batch, step)
            processing.sampled(tokens, step, logits)
        if grammar is not None:
            grammar.accept(tokens, step)
        return tokens

    def _draw(self, logits: torch.Tensor, batch: SamplingBatch, step: int) -> torch.Tensor:
        if batch.all_greedy:  # decided on the host: no noise, no filtering
            return logits.argmax(-1)
        # a row sitting out the step (past its round's steps) draws nothing
        seeded_rows = [
            (row, generator)
            for row, generator in batch.seeded_rows
            if batch.num_steps is None or step < batch.num_steps[row]
        ]
        if self.race_kernel and batch.top_k is None and not seeded_rows:
            from nvllm.ops.race_triton import race_in_kernels  # Triton: imported only where it runs

            seed = int(torch.randint(RACE_SEEDS, ()))  # torch's CPU generator: torch.manual_seed repeats it
            return race_in_kernels(logits, batch.inv_temperatures, batch.noise_scales, seed)
        noise = torch.empty(logits.shape, dtype=torch.float32, device=logits.device).exponential_()
        for row, generator in seeded_rows:  # reproducible per request, whatever shares the batch
            noise[row] = torch.empty(logits.shape[1]).exponential_(generator=generator).to(noise.device)
        if batch.top_k is None:
            in_chunks = logits.shape[0] <= self.CHUNKED_MAX_ROWS
            return (self._race_in_chunks if in_chunks else self._race)(
                logits, batch.inv_temperatures, batch.noise_scales, noise
            )
        scores = self._filter_top_k_top_p(logits.float() * batch.inv_temperatures.unsqueeze(1), batch)
        return race(scores, torch.ones_like(batch.inv_temperatures), batch.noise_scales, noise)

    def warm_up(self, vocab_size: int, dtype: torch.dtype, device: torch.device | str) -> None:
        """Compile both of the race's graphs, or its kernels, now (at start-up) rather than on a first
        sampled batch, for logits of the model's dtype."""
        for num_rows in (2, self.CHUNKED_MAX_ROWS + 1):
            logits = torch.zeros(num_rows, vocab_size, dtype=dtype, device=device)
            batch = self.prepare([SamplingParams()] * num_rows, [None] * num_rows, device)
            self.sample(logits, batch)
            if self.race_kernel and self.compiled:  # the kernels took it: the graphs serve seeded rows, top-k
                race_graph = self._race_in_chunks if num_rows <= self.CHUNKED_MAX_ROWS else self._race
                noise = torch.ones(logits.shape, dtype=torch.float32, device=device)
                race_graph(logits, batch.inv_temperatures, batch.noise_scales, noise)

    def __call__(
        self, logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
    ) -> list[int]:
        return self.sample(logits, self.prepare(params, generators, logits.device)).tolist()

    @staticmethod
    def _filter_top_k_top_p(scores: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        vocab_size = scores.shape[1]
        top_k = torch.where(batch.top_k > 0, batch.top_k, vocab_size)
        # stable: of tied scores the lowest token id ranks first, so that a filter leaving one token (top_k=1,
        # a small top_p) keeps the one greedy's argmax takes
        sorted_scores, order = scores.sort(dim=-1, descending=True, stable=True)
        ranks = torch.arange(vocab_size, device=scores.device).unsqueeze(0)
        sorted_probs = sorted_scores.softmax(-1)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # keeps the first token that crosses top_p
        drop = (ranks >= top_k.unsqueeze(1)) | (mass_before >= batch.top_p.unsqueeze(1))
        sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
        return torch.empty_like(scores).scatter_(1, order, sorted_scores)
