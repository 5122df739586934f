"""Rows of the device's token table (see `StepInputs.token_rows`): one per running sequence, at most
`max_num_seqs`. A decode step reads a sequence's newest token from its row, where the sampler wrote it."""

from __future__ import annotations

from nvllm.scheduler.sequence import Sequence


class TokenRows:
    """The free rows, and the only writer of `Sequence.token_row`."""

    def __init__(self, num_rows: int):
        self.free_rows = list(range(num_rows))

    def fit(self, seq: Sequence) -> bool:
        """Whether there are rows for the sequence and its forks (which sample their first tokens in its
        prompt's last step, so they run from then on)."""
        return len(self.free_rows) > len(seq.forks)

    def assign(self, seq: Sequence) -> None:
        """Rows for the sequence and its forks."""
        for member in (seq, *seq.forks):
            member.token_row = self.free_rows.pop()

    def release(self, member: Sequence) -> None:
        self.free_rows.append(member.token_row)
        member.token_row = None
