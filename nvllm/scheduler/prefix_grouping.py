"""Prefix-grouped admission (`scheduler.group_prefixes`): the order in which waiting requests are admitted,
so that those sharing a prompt prefix run together.

An offline `generate` call queues all its requests up front. Admitted in plain order, requests under one
prefix that start in the same prefill step each compute the prefix (the prefix cache only holds blocks
once a step has computed them), and requests of different prefixes interleave in the running batch. Grouped,
a request's group is the hash of its first full prompt block (the prefix cache's own chained hash), and:
- a group none of whose members runs admits one member (its leader) in a step; the others wait until the
  leader's prompt is computed, then find the prefix in the cache;
- members of a group that runs with its prompt computed go first, so that the group's shared blocks stay
  referenced (never evicted) while it runs, and decode batches hold whole groups, whose prefix cascade
  attention reads once per step.
Reordering is bounded: a request that later ones have overtaken `max_bypass` times goes first, before any
group, whatever its group's state.
"""

from __future__ import annotations

import bisect
import weakref

from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.sequence import Sequence


class PrefixGrouping:
    def __init__(self, block_manager: BlockManager, max_bypass: int):
        self.block_manager = block_manager
        self.max_bypass = max_bypass
        # weak: what is known of a sequence goes with it
        self._bypassed: weakref.WeakKeyDictionary[Sequence, int] = weakref.WeakKeyDictionary()

    def key(self, seq: Sequence) -> int | None:
        """The chained hash of the sequence's first block, when its prompt fills one (and one more token,
        which the prefix cache always leaves to compute)."""
        if seq.num_prompt_tokens <= self.block_manager.block_size:
            return None
        return self.block_manager.block_hashes(seq, 1)[0]

    def admission_order(self, waiting: list[Sequence], running: list[Sequence]) -> list[Sequence]:
        """The waiting sequences (in the scheduler's order) in the order to admit them this step, less those
        held back: starved ones first, then members of groups that run with their prompt computed, then the
        rest with one leader per group that does not run yet."""
        computing, computed = set(), set()
        for seq in running:
            (computing if seq.num_uncomputed_tokens > 1 else computed).add(self.key(seq))
        starved, warm, rest, leaders = [], [], [], set()
        for seq in waiting:
            key = self.key(seq)
            if self._bypassed.get(seq, 0) >= self.max_bypass:
                starved.append(seq)
            elif key is None:
                rest.append(seq)
            elif key in computed:
                warm.append(seq)
            elif key not in computing and key not in leaders:
                leaders.add(key)
                rest.append(seq)
        return starved + warm + rest

    def admitted(self, seqs: list[Sequence], waiting_before: list[Sequence]) -> None:
        """`seqs` were admitted from `waiting_before` (the scheduler's order): each one still waiting counts
        those behind it that went first."""
        place = {id(seq): index for index, seq in enumerate(waiting_before)}
        admitted_places = sorted(place[id(seq)] for seq in seqs)
        for seq in seqs:
            self._bypassed.pop(seq, None)
        taken = {id(seq) for seq in seqs}
        for index, seq in enumerate(waiting_before):
            overtaken = len(admitted_places) - bisect.bisect_right(admitted_places, index)
            if overtaken and id(seq) not in taken:
                self._bypassed[seq] = self._bypassed.get(seq, 0) + overtaken
