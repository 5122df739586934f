"""What one step computes: the scheduler's answer to "what runs next"."""

from __future__ import annotations

from dataclasses import dataclass, field

from nvllm.scheduler.sequence import Sequence


@dataclass
class ScheduledBatch:
    """What one step computes. Prefill: for each sequence, its next `num_new_tokens` uncomputed tokens.
    Decode: for each sequence, `num_new_tokens` decode steps, each sampling one token (see
    `SchedulerConfig.num_decode_steps`)."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    is_prefill: bool = True
    # KV blocks to copy (source, destination) before the batch runs: forks' copies of a prompt's last block
    block_copies: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def num_steps(self) -> int:
        return 1 if self.is_prefill else max(self.num_new_tokens)

    @property
    def sampled_seqs(self) -> list[Sequence]:
        """The sequences that get tokens sampled: all in decode; in prefill, those whose prompt completes,
        each followed by its forks (`Sequence.forks`: they sample their first tokens from its logits)."""
        return [
            member
            for seq, num_new in zip(self.seqs, self.num_new_tokens)
            if not self.is_prefill or seq.computed_len + num_new == seq.host_len
            for member in (seq, *seq.forks)
        ]

    def add(self, seq: Sequence, num_new_tokens: int) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(num_new_tokens)
