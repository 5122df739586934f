"""Prompt log-probabilities (`SamplingParams.prompt_logprobs`): for the prompt positions of a prefill step
whose requests ask, the log-probability of the next prompt token and the top k, computed on the device from
the logits of those positions (which the model computes for these requests only); only those k + 1 values
and k ids per position are copied to the host."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nvllm.scheduler.sequence import Sequence
from nvllm.transfer import to_device

# log-softmax in float32 over this many positions at a time: a long prompt's whole [positions, vocab] in
# float32 would take several times the logits' own memory
ROWS_PER_PASS = 1024


@dataclass
class PromptLogprobs:
    """What one prefill step computes for the prompt log-probabilities of its sequences (in batch order)."""

    target_ids: list[int]  # per position, the prompt token its logits predict (the next one)
    targets: torch.Tensor  # [P] `target_ids` on the device
    num_top: int  # the most top log-probabilities a sequence of the step asked for
    num_positions: list[int]  # per sequence of the batch, its positions among the P (0: it asked none)
    num_top_per_seq: list[int]  # per sequence, the top log-probabilities it asked for
    values: torch.Tensor | None = None  # [P, 1 + num_top]: the target's log-probability, then the top ones'
    top_ids: torch.Tensor | None = None  # [P, num_top]

    def record(self, logits: torch.Tensor) -> None:
        """From the logits of the P positions (raw, as vLLM reports prompt log-probabilities)."""
        values, top_ids = [], []
        for start in range(0, logits.shape[0], ROWS_PER_PASS):
            logprobs = logits[start : start + ROWS_PER_PASS].float().log_softmax(-1)
            target = logprobs.gather(1, self.targets[start : start + ROWS_PER_PASS].unsqueeze(1))
            top_values, top = logprobs.topk(self.num_top, dim=-1)
            values.append(torch.cat([target, top_values], dim=1))
            top_ids.append(top)
        self.values, self.top_ids = torch.cat(values), torch.cat(top_ids)

    def entries(self, values: list[list[float]], top_ids: list[list[int]]) -> list[list[dict[int, float]]]:
        """Per sequence of the batch, per position, token id -> log-probability: the prompt token's first,
        then its top k by rank (the order of completion log-probabilities), from host copies of `values`
        and `top_ids`."""
        result, position = [], 0
        for num_positions, num_top in zip(self.num_positions, self.num_top_per_seq):
            entries = []
            for row in range(position, position + num_positions):
                entry = {self.target_ids[row]: values[row][0]}
                for token, value in zip(top_ids[row][:num_top], values[row][1 : 1 + num_top]):
                    entry.setdefault(token, value)
                entries.append(entry)
            result.append(entries)
            position += num_positions
        return result


def prompt_logprobs(
    seqs: list[Sequence], num_new_tokens: list[int], vocab_size: int, device: torch.device | str
) -> PromptLogprobs | None:
    """For a prefill step computing `num_new_tokens` of each of `seqs`; None when none of its positions
    needs prompt log-probabilities."""
    positions = [seq.prompt_logits_positions(num_new) for seq, num_new in zip(seqs, num_new_tokens)]
    if not any(positions):
        return None
    targets = [seq.token_ids[p + 1] for seq, span in zip(seqs, positions) for p in span]
    num_top = [seq.sampling_params.num_prompt_logprobs(vocab_size) or 0 for seq in seqs]
    return PromptLogprobs(
        target_ids=targets,
        targets=to_device(torch.tensor(targets, dtype=torch.int64), device),
        num_top=max(k for k, span in zip(num_top, positions) if span),
        num_positions=[len(span) for span in positions],
        num_top_per_seq=num_top,
    )
