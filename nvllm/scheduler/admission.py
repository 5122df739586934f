"""Prefill admission: prompts chunked in earlier steps first, then waiting ones in the policy's order (grouped
by shared prefix where asked), each admitted when the token budget, the token table and the KV cache take it,
preempting running sequences of lower priority to make room where the policy lets it."""

from __future__ import annotations

import itertools

from nvllm.config import SchedulerConfig
from nvllm.scheduler.batch import ScheduledBatch
from nvllm.scheduler.lifecycle import SequenceLifecycle
from nvllm.scheduler.prefix_grouping import PrefixGrouping
from nvllm.scheduler.sequence import Sequence


def prefill_chunk(seq: Sequence, budget: int) -> int:
    """How many of the sequence's uncomputed tokens a prefill step with `budget` tokens left takes: all
    that fit, but never all but one. The one left would go to a decode step, which takes a sequence's
    newest token from the device's token table, where only sampled tokens are."""
    num_tokens = min(seq.num_uncomputed_tokens, budget)
    return num_tokens - 1 if seq.num_uncomputed_tokens - num_tokens == 1 else num_tokens


class Admission:
    def __init__(self, config: SchedulerConfig, lifecycle: SequenceLifecycle):
        self.config = config
        self.lifecycle = lifecycle
        self.block_manager = lifecycle.block_manager
        self.policy = lifecycle.policy
        self.prefix_grouping = None
        if config.group_prefixes:
            self.prefix_grouping = PrefixGrouping(self.block_manager, max_bypass=config.max_num_seqs)

    def schedule(self) -> ScheduledBatch:
        """A prefill step: empty when no prompt needs one."""
        lifecycle = self.lifecycle
        batch, budget = ScheduledBatch(is_prefill=True), self.config.max_num_batched_tokens
        for seq in lifecycle.running:  # prompts chunked in an earlier step go on first
            if seq.num_uncomputed_tokens > 1 and (num_tokens := prefill_chunk(seq, budget)):
                batch.add(seq, num_tokens)
                budget -= num_tokens
        # with one token of budget left, `prefill_chunk` could take nothing of a new prompt (one of two
        # tokens would leave the other for a decode step): admission waits for the next step
        waiting_before, admitted = list(lifecycle.waiting), []
        for seq in self.order():
            if budget < 2 or not lifecycle.token_rows.fit(seq):
                break
            if not self.config.chunked_prefill and batch.seqs and seq.host_len > budget:
                break
            if not self.block_manager.can_allocate(seq) and not self._make_room(seq, batch):
                break
            lifecycle.admit(seq)
            admitted.append(seq)
            num_tokens = prefill_chunk(seq, budget)
            batch.add(seq, num_tokens)
            budget -= num_tokens
        if self.prefix_grouping is not None:
            self.prefix_grouping.admitted(admitted, waiting_before)
        return batch

    def more_waiting_than_room(self) -> bool:
        """Whether the waiting prompts (with their forks) need more token-table rows or KV blocks than are
        free (blocks counted without prefix-cache hits)."""
        rows, blocks = len(self.lifecycle.token_rows.free_rows), self.block_manager.num_free_blocks
        for seq in self.lifecycle.waiting:
            rows -= 1 + len(seq.forks)
            blocks -= self.block_manager.blocks_for(seq.host_len)
            if rows < 0 or blocks < 0:
                return True
        return False

    def order(self) -> list[Sequence]:
        """The waiting sequences in the order a prefill step tries to admit them (it stops at the first
        that does not fit): the queue's, or grouped by shared prefix (`scheduler.group_prefixes`) among the
        sequences the policy ranks equal, so that grouping never puts a lower priority first."""
        waiting = self.lifecycle.waiting
        if self.prefix_grouping is None:
            return list(waiting)
        return [
            seq
            for _, equals in itertools.groupby(waiting, key=self.policy.rank)
            for seq in self.prefix_grouping.admission_order(list(equals), self.lifecycle.running)
        ]

    def can_admit(self) -> bool:
        """Whether a prefill step could take the first waiting prompt now."""
        order = self.order() if self.lifecycle.waiting else []
        return (
            bool(order)
            and self.lifecycle.token_rows.fit(order[0])
            and self.block_manager.can_allocate(order[0])
        )

    def _make_room(self, seq: Sequence, batch: ScheduledBatch) -> bool:
        """Preempt running sequences the policy lets `seq` preempt (the last in its order first; none that
        `batch` already holds) until `seq` can be allocated; nothing when even all of them would not do."""
        victims = [
            other
            for other in self.lifecycle.running
            if self.policy.may_preempt_for(seq, other) and other not in batch.seqs
        ]
        held = sum(len(other.block_table) for other in victims)
        if held + self.block_manager.num_free_blocks < self.block_manager.blocks_for(seq.host_len):
            return False
        while victims and not self.block_manager.can_allocate(seq):
            self.lifecycle.preempt(victims.pop())
        return self.block_manager.can_allocate(seq)
