"""A sequence's moves between waiting, running and finished, and what each move takes or gives back: KV
blocks (the block manager's) and token-table rows. Every move is recorded as an event for the engine."""

from __future__ import annotations

import time

from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.events import EventKind, SchedulerEvent
from nvllm.scheduler.policy import SchedulingPolicy, WaitingQueue
from nvllm.scheduler.sequence import Sequence, SequenceStatus
from nvllm.scheduler.token_rows import TokenRows


class SequenceLifecycle:
    """The waiting queue and the running sequences (in the policy's order: the last is preempted first);
    the only writer of `Sequence.status`."""

    def __init__(self, policy: SchedulingPolicy, block_manager: BlockManager, token_rows: TokenRows):
        self.policy = policy
        self.block_manager = block_manager
        self.token_rows = token_rows
        self.waiting = WaitingQueue(policy)
        self.running: list[Sequence] = []
        self.pending_block_copies: list[tuple[int, int]] = []  # for the next batch (`block_copies`)
        self.events: list[SchedulerEvent] = []  # since the engine last took them
        self.num_preemptions = 0

    def admit(self, seq: Sequence) -> None:
        """From waiting to running: blocks for its tokens (prefix-cache hits shared) and rows for it and its
        forks."""
        self.block_manager.allocate(seq)
        self.waiting.remove(seq)
        seq.status = SequenceStatus.RUNNING
        if seq.first_scheduled_time is None:  # not again after a preemption
            seq.first_scheduled_time = time.time()
        self.token_rows.assign(seq)
        self.policy.insert(self.running, seq)
        self.events.append(SchedulerEvent(EventKind.SCHEDULED, seq))

    def preempt(self, seq: Sequence) -> None:
        """Drop the sequence's KV (it is recomputed on re-admission, partly from the prefix cache)."""
        self._release(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.add(seq)
        self.num_preemptions += 1
        self.events.append(SchedulerEvent(EventKind.PREEMPTED, seq))

    def start_fork(self, parent: Sequence, fork: Sequence) -> None:
        """`fork` runs from now on as a sequence of its own, on the KV of `parent`'s prompt."""
        copy = self.block_manager.fork(parent, fork)
        if copy is not None:
            self.pending_block_copies.append(copy)
        fork.status = SequenceStatus.RUNNING
        self.policy.insert(self.running, fork)

    def finish(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.FINISHED
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        """Take `seq` out of the running ones: its KV blocks and its token-table row go back (and those
        reserved for its forks, if its prompt was not computed yet)."""
        self.running.remove(seq)
        for member in (seq, *seq.forks):
            self.block_manager.free(member)
            self.token_rows.release(member)
            self.events.append(SchedulerEvent(EventKind.RELEASED, member))

    def take_block_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_block_copies = self.pending_block_copies, []
        return copies

    def take_events(self) -> list[SchedulerEvent]:
        events, self.events = self.events, []
        return events

    def abort(self, seq: Sequence) -> None:
        """Drop one sequence wherever it is: waiting, or running with its KV blocks and token-table row (and
        those reserved for its unstarted forks) given back now. A decode round in flight that holds it keeps
        nothing of it (`Postprocessor` skips finished sequences)."""
        if seq.status is SequenceStatus.RUNNING:
            self._release(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        for member in (seq, *seq.forks):
            member.status = SequenceStatus.FINISHED

    def abort_all(self) -> None:
        for seq in list(self.running):
            self._release(seq)
        self.waiting.clear()
        self.pending_block_copies.clear()
