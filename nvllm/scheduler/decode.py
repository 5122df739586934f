"""Decode rounds: each running sequence takes up to `num_decode_steps` steps, the oldest first, preempting
the newest when the KV cache runs out; the round planned while another is still in flight
(`scheduler.overlap_rounds`); and the order of a round's rows (`scheduler.longest_first`)."""

from __future__ import annotations

from nvllm.config import SchedulerConfig
from nvllm.scheduler.batch import ScheduledBatch
from nvllm.scheduler.lifecycle import SequenceLifecycle
from nvllm.scheduler.sequence import Sequence, SequenceStatus
from nvllm.scheduler.stops import StopChecker


class DecodeRounds:
    def __init__(self, config: SchedulerConfig, lifecycle: SequenceLifecycle, stops: StopChecker):
        self.config = config
        self.lifecycle = lifecycle
        self.block_manager = lifecycle.block_manager
        self.stops = stops
        self.num_decode_steps = config.num_decode_steps  # the longest round
        self.one_step = False  # rounds of one step (the scheduler's choice for streams)

    def schedule(self) -> ScheduledBatch:
        lifecycle, manager = self.lifecycle, self.block_manager
        batch = ScheduledBatch(is_prefill=False)
        for seq in list(lifecycle.running):  # oldest first: they hold the most work
            if len(batch.seqs) == self.config.max_num_batched_tokens:
                break
            if seq.status != SequenceStatus.RUNNING:
                continue  # preempted in this loop to make room for an older one
            while not manager.can_append(seq):
                victim = lifecycle.running[-1]
                lifecycle.preempt(victim)
                if victim is seq:
                    break
            if seq.status == SequenceStatus.RUNNING:
                num_steps = self._num_steps(seq)
                manager.append_slots(seq, num_steps)
                batch.add(seq, num_steps)
        return self._ordered(batch)

    def next_round(self) -> ScheduledBatch | None:
        """The round to launch while the current one (in which every running sequence takes part) still
        runs: the same sequences as if none stops inside it, less those that reach a token limit with it.
        None where a sequence did not take part in it, or the free blocks do not hold the round."""
        plan = []
        for seq in self.lifecycle.running:
            if seq.num_in_flight_tokens == 0:
                return None
            if self.stops.tokens_left(seq) > 0 and len(plan) < self.config.max_num_batched_tokens:
                plan.append((seq, self._num_steps(seq)))
        manager = self.block_manager
        if (
            not plan
            or sum(manager.num_new_blocks(seq, steps) for seq, steps in plan) > manager.num_free_blocks
        ):
            return None
        batch = ScheduledBatch(is_prefill=False)
        for seq, num_steps in plan:
            manager.append_slots(seq, num_steps)
            batch.add(seq, num_steps)
        return self._ordered(batch)

    def _ordered(self, batch: ScheduledBatch) -> ScheduledBatch:
        """The round's rows longest first where `scheduler.longest_first` says (ties keep arrival order);
        the oldest-first order above decides only who runs and who is preempted."""
        if self.config.longest_first:
            rows = sorted(range(len(batch.seqs)), key=lambda row: -batch.seqs[row].device_len)
            batch.seqs = [batch.seqs[row] for row in rows]
            batch.num_new_tokens = [batch.num_new_tokens[row] for row in rows]
        return batch

    def _num_steps(self, seq: Sequence) -> int:
        """Steps up to `num_decode_steps`, none past the sequence's token limits, and only as many as its
        blocks and the free ones hold: memory goes to keeping sequences running before longer rounds."""
        room = self.block_manager.max_decode_steps(seq)
        longest = 1 if self.one_step else self.num_decode_steps
        return max(1, min(longest, self.stops.tokens_left(seq), room))
