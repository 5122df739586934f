"""What the tensor-parallel tests compare an engine by: the logits of one prefill step, whatever the TP size
(every rank runs the step, rank 0 keeps the logits). Where two greedy generations part, and whether at a
near-tie: experiments.harness.parity."""

from __future__ import annotations

import torch

from nvllm import LLM, SamplingParams
from nvllm.sampling.sampler import Sampler


def prefill_logits(llm: LLM, prompts: list[list[int]]) -> torch.Tensor:
    """`[prompts, vocab]` fp32 logits at each prompt's last token, from one prefill step of all of them
    (they must fit the token budget together)."""
    seqs = [llm.add_request(prompt, SamplingParams(max_tokens=1)) for prompt in prompts]
    batch = llm.scheduler.schedule()
    assert batch.is_prefill and set(batch.sampled_seqs) == set(seqs), "the prompts need one prefill step"
    captured = []

    def keeping_logits(sample):
        def sample_keeping_logits(logits: torch.Tensor, step: int) -> torch.Tensor:
            captured.append(logits.float().cpu())
            return sample(logits, step)

        return sample_keeping_logits

    steps = llm.inputs.build(batch)
    greedy = [SamplingParams(temperature=0)] * len(seqs)
    sampling = Sampler.prepare(greedy, [None] * len(seqs), llm.device, num_rows=steps[0].num_logits)
    llm.model_runner.execute(steps, sampling, keeping_logits)
    llm.abort_all()
    rows = [batch.sampled_seqs.index(seq) for seq in seqs]
    return captured[0][rows]


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest per-row relative L2 distance."""
    return ((ours - reference).norm(dim=-1) / reference.norm(dim=-1)).max().item()


def whole_relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """The relative L2 distance of the whole tensor."""
    return ((ours - reference).norm() / reference.norm()).item()
