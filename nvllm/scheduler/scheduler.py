from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from nvllm.config import SchedulerConfig
from nvllm.profiling import NullProfiler, Profiler
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.policy import SchedulingPolicy, WaitingQueue
from nvllm.scheduler.prefix_grouping import PrefixGrouping
from nvllm.scheduler.sequence import Sequence, SequenceStatus
from nvllm.scheduler.stops import StopChecker


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


class Scheduler:
    """Continuous batching: prefill (chunked when it exceeds the token budget) before decode, and
    preemption by recompute of the last running sequence in the policy's order (`scheduling_policy`: by
    default the newest) when the KV cache runs out."""

    def __init__(
        self,
        config: SchedulerConfig,
        block_manager: BlockManager,
        eos_token_id: int,
        profiler: Profiler | NullProfiler | None = None,
    ):
        self.config = config
        # a decode round's length; the engine shortens it while a stream wants every token as it comes
        self.num_decode_steps = config.num_decode_steps
        self.profiler = profiler or NullProfiler()  # told of every admission and preemption
        self.block_manager = block_manager
        self.stops = StopChecker(eos_token_id, config.max_model_len)
        self.policy = SchedulingPolicy(config.policy)
        self.waiting = WaitingQueue(self.policy)
        self.running: list[Sequence] = []  # in the policy's order: the last is preempted first
        self.pending_block_copies: list[tuple[int, int]] = []  # for the next batch (see `block_copies`)
        # rows of the device's token table (see StepInputs.token_rows), one per running sequence
        self.free_token_rows = list(range(config.max_num_seqs))
        self.num_preemptions = 0
        self.num_generated_tokens = 0  # sampled tokens kept (those sampled after a stop are not)
        self.prefix_grouping = None
        if config.group_prefixes:
            self.prefix_grouping = PrefixGrouping(block_manager, max_bypass=config.max_num_seqs)

    def add(self, seq: Sequence) -> None:
        self.waiting.add(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> ScheduledBatch:
        batch = self._schedule_prefill()
        return self._with_block_copies(batch if batch.seqs else self._schedule_decode())

    def _with_block_copies(self, batch: ScheduledBatch) -> ScheduledBatch:
        batch.block_copies, self.pending_block_copies = self.pending_block_copies, []
        return batch

    def _schedule_prefill(self) -> ScheduledBatch:
        batch, budget = ScheduledBatch(is_prefill=True), self.config.max_num_batched_tokens
        for seq in self.running:  # prompts chunked in an earlier step go on first
            if seq.num_uncomputed_tokens > 1 and (num_tokens := self._prefill_chunk(seq, budget)):
                batch.add(seq, num_tokens)
                budget -= num_tokens
        # with one token of budget left, `_prefill_chunk` could take nothing of a new prompt (one of two
        # tokens would leave the other for a decode step): admission waits for the next step
        waiting_before, admitted = list(self.waiting), []
        for seq in self._admission_order():
            if budget < 2 or not self._has_rows_for(seq):
                break
            if not self.config.chunked_prefill and batch.seqs and seq.host_len > budget:
                break
            if not self.block_manager.can_allocate(seq) and not self._make_room(seq, batch):
                break
            self.block_manager.allocate(seq)
            self.waiting.remove(seq)
            admitted.append(seq)
            seq.status = SequenceStatus.RUNNING
            for member in (seq, *seq.forks):  # forks sample their first token in the prompt's last step
                member.token_row = self.free_token_rows.pop()
            self.policy.insert(self.running, seq)
            self.profiler.request_scheduled(seq)
            num_tokens = self._prefill_chunk(seq, budget)
            batch.add(seq, num_tokens)
            budget -= num_tokens
        if self.prefix_grouping is not None:
            self.prefix_grouping.admitted(admitted, waiting_before)
        return batch

    def _admission_order(self) -> list[Sequence]:
        """The waiting sequences in the order a prefill step tries to admit them (it stops at the first
        that does not fit): the queue's, or grouped by shared prefix (`scheduler.group_prefixes`) among the
        sequences the policy ranks equal, so that grouping never puts a lower priority first."""
        if self.prefix_grouping is None:
            return list(self.waiting)
        return [
            seq
            for _, equals in itertools.groupby(self.waiting, key=self.policy.rank)
            for seq in self.prefix_grouping.admission_order(list(equals), self.running)
        ]

    def _has_rows_for(self, seq: Sequence) -> bool:
        """Whether the token table has rows for the sequence and its forks (one per running sequence: at
        most `max_num_seqs`)."""
        return len(self.free_token_rows) > len(seq.forks)

    def _make_room(self, seq: Sequence, batch: ScheduledBatch) -> bool:
        """Preempt running sequences the policy lets `seq` preempt (the last in its order first; none that
        `batch` already holds) until `seq` can be allocated; nothing when even all of them would not do."""
        victims = [
            other
            for other in self.running
            if self.policy.may_preempt_for(seq, other) and other not in batch.seqs
        ]
        held = sum(len(other.block_table) for other in victims)
        if held + self.block_manager.num_free_blocks < self.block_manager.blocks_for(seq.host_len):
            return False
        while victims and not self.block_manager.can_allocate(seq):
            self._preempt(victims.pop())
        return self.block_manager.can_allocate(seq)

    @staticmethod
    def _prefill_chunk(seq: Sequence, budget: int) -> int:
        """How many of the sequence's uncomputed tokens a prefill step with `budget` tokens left takes: all
        that fit, but never all but one. The one left would go to a decode step, which takes a sequence's
        newest token from the device's token table, where only sampled tokens are."""
        num_tokens = min(seq.num_uncomputed_tokens, budget)
        return num_tokens - 1 if seq.num_uncomputed_tokens - num_tokens == 1 else num_tokens

    def _schedule_decode(self) -> ScheduledBatch:
        batch = ScheduledBatch(is_prefill=False)
        for seq in list(self.running):  # oldest first: they hold the most work
            if len(batch.seqs) == self.config.max_num_batched_tokens:
                break
            if seq.status != SequenceStatus.RUNNING:
                continue  # preempted in this loop to make room for an older one
            while not self.block_manager.can_append(seq):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status == SequenceStatus.RUNNING:
                num_steps = self._num_decode_steps(seq)
                self.block_manager.append_slots(seq, num_steps)
                batch.add(seq, num_steps)
        return batch

    def schedule_next_round(self, in_flight: ScheduledBatch) -> ScheduledBatch | None:
        """The decode round to launch while `in_flight` (launched, see `launched`) still runs: the same
        sequences as if none stops inside it, less those that reach a token limit with it. A sequence that
        does stop (EOS) wastes its steps of this round; `postprocess` drops them. None where the next step
        needs the host to know the tokens first: a prompt to admit, a sequence to preempt, one that did not
        take part in `in_flight`."""
        if in_flight.is_prefill or self._can_admit():
            return None
        plan = []
        for seq in self.running:
            if seq.num_in_flight_tokens == 0:
                return None
            if self.stops.tokens_left(seq) > 0 and len(plan) < self.config.max_num_batched_tokens:
                plan.append((seq, self._num_decode_steps(seq)))
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
        return batch

    def _can_admit(self) -> bool:
        """Whether a prefill step could take the first waiting prompt now."""
        order = self._admission_order() if self.waiting else []
        return bool(order) and self._has_rows_for(order[0]) and self.block_manager.can_allocate(order[0])

    def launched(self, batch: ScheduledBatch) -> None:
        """The device now computes `batch`: a decode round's tokens are on the device until `postprocess`."""
        if batch.is_prefill:
            return
        for seq, num_steps in zip(batch.seqs, batch.num_new_tokens):
            seq.num_in_flight_tokens += num_steps

    def _num_decode_steps(self, seq: Sequence) -> int:
        """Steps up to `num_decode_steps`, none past the sequence's token limits, and only as many as its
        blocks and the free ones hold: memory goes to keeping sequences running before longer rounds."""
        room = self.block_manager.max_decode_steps(seq)
        return max(1, min(self.num_decode_steps, self.stops.tokens_left(seq), room))

    def _preempt(self, seq: Sequence) -> None:
        """Drop the sequence's KV (it is recomputed on re-admission, partly from the prefix cache)."""
        self._release(seq)
        seq.computed_len = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.add(seq)
        self.num_preemptions += 1
        self.profiler.request_preempted(seq)

    def postprocess(
        self,
        batch: ScheduledBatch,
        sampled_token_ids: list[list[int]],
        sampled_logprobs: list[list[dict[int, float]]] | None = None,
    ) -> list[Sequence]:
        """Account the computed tokens, append the tokens sampled for each of `batch.sampled_seqs` (in
        that order; with their log-probabilities where asked) up to a stop, and retire finished sequences.
        Returns the finished ones. A decode round's tokens replace the oldest of the sequence's pending
        ones; a sequence that finished while this round was in flight (see `schedule_next_round`) takes
        nothing. A prompt's forks start here, on its first tokens."""
        finished, sampled = [], iter(range(len(sampled_token_ids)))
        for seq, num_tokens in zip(batch.seqs, batch.num_new_tokens):
            if batch.is_prefill and seq.num_uncomputed_tokens > num_tokens:
                seq.computed_len += num_tokens  # a chunk of a longer prompt: nothing sampled yet
                self.block_manager.register_computed_blocks(seq)
                continue
            forks, seq.forks = (seq.forks, []) if batch.is_prefill else ([], seq.forks)
            for fork in forks:  # before the prompt's owner appends a token to its blocks
                self._start_fork(seq, fork)
            for member in (seq, *forks):
                row = next(sampled)
                if member.is_finished:
                    continue
                new_tokens = sampled_token_ids[row]
                if not batch.is_prefill:
                    new_tokens = new_tokens[:num_tokens]  # steps of the round this sequence sat out
                    member.num_in_flight_tokens -= num_tokens
                logprobs = sampled_logprobs[row] if sampled_logprobs is not None else None
                if self._append(member, new_tokens, logprobs):
                    finished.append(member)
        return finished

    def _start_fork(self, parent: Sequence, fork: Sequence) -> None:
        """`fork` runs from now on as a sequence of its own, on the KV of `parent`'s prompt."""
        copy = self.block_manager.fork(parent, fork)
        if copy is not None:
            self.pending_block_copies.append(copy)
        fork.status, fork.cached_len = SequenceStatus.RUNNING, parent.cached_len
        self.policy.insert(self.running, fork)

    def _append(self, seq: Sequence, new_tokens: list[int], logprobs: list | None) -> bool:
        """Append the tokens sampled for `seq` up to a stop (those after it are discarded); True when it
        finished."""
        kept, stop = self.stops.take(seq, new_tokens)
        if kept and seq.first_token_time is None:
            seq.first_token_time = time.time()
        seq.token_ids.extend(new_tokens[:kept])
        if seq.logprobs is not None and logprobs is not None:
            seq.logprobs.extend(logprobs[:kept])
        self.num_generated_tokens += kept
        seq.computed_len = seq.host_len - 1  # the newest token's K/V is written by the step it feeds
        self.block_manager.register_computed_blocks(seq)
        if stop is None:
            return False
        seq.finish_reason, seq.stop_reason = stop
        seq.finished_time = time.time()
        seq.num_in_flight_tokens = 0  # a round launched after this one computes nothing it keeps
        seq.status = SequenceStatus.FINISHED
        self._release(seq)
        return True

    def _release(self, seq: Sequence) -> None:
        """Take `seq` out of the running ones: its KV blocks and its token-table row go back (and those
        reserved for its forks, if its prompt was not computed yet)."""
        self.running.remove(seq)
        seq.penalty_history = None  # rebuilt from the host's tokens when it is admitted again
        for member in (seq, *seq.forks):
            self.block_manager.free(member)
            self.free_token_rows.append(member.token_row)
            member.token_row = None

    def abort_all(self) -> None:
        """Drop every request (after an error: the engine stays usable)."""
        for seq in list(self.running):
            self._release(seq)
        self.waiting.clear()
        self.pending_block_copies.clear()
