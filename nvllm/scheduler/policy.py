"""The order in which the scheduler serves sequences (`scheduler.policy`), and the waiting queue kept in it.

One order serves every decision: waiting prompts are admitted in it, running sequences are served in it,
and the last running one in it is preempted first. `fcfs`: by arrival. `priority`: by `priority` (lower
first, vLLM's convention), then by arrival; a waiting request may then also preempt running ones of lower
priority to get its KV blocks.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from nvllm.scheduler.sequence import Sequence

# a sequence's rank under each policy (lower first); equal ranks are served by arrival
RANKS: dict[str, Callable[[Sequence], int]] = {
    "fcfs": lambda seq: 0,
    "priority": lambda seq: seq.priority,
}


class SchedulingPolicy:
    def __init__(self, name: str):
        if name not in RANKS:
            raise ValueError(f"scheduler.policy={name!r} must be one of {sorted(RANKS)}")
        self.name = name
        self.rank = RANKS[name]

    def key(self, seq: Sequence) -> tuple[int, int]:
        return self.rank(seq), seq.seq_id

    def insert(self, seqs: list[Sequence], seq: Sequence) -> None:
        """Put `seq` into `seqs` (kept in this order)."""
        bisect.insort(seqs, seq, key=self.key)

    def may_preempt_for(self, waiting: Sequence, running: Sequence) -> bool:
        """Whether admitting `waiting` may preempt `running` when it needs its blocks."""
        return self.name == "priority" and running.priority > waiting.priority


class WaitingQueue:
    """Sequences waiting for admission, in the policy's order (preempted ones return to their place)."""

    def __init__(self, policy: SchedulingPolicy):
        self.policy = policy
        self._seqs: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.policy.insert(self._seqs, seq)

    def first(self) -> Sequence:
        return self._seqs[0]

    def remove(self, seq: Sequence) -> None:
        self._seqs.remove(seq)

    def clear(self) -> None:
        self._seqs.clear()

    def __len__(self) -> int:
        return len(self._seqs)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(self._seqs)
