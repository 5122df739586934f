"""The engine's scheduler: continuous batching, prefill (chunked when it exceeds the token budget) before
decode, and preemption by recompute of the last running sequence in the policy's order (`scheduler.policy`:
by default the newest) when the KV cache runs out. The work is done by its parts, each owning its state:
`SequenceLifecycle` (waiting and running, blocks and token rows), `Admission` (prefill), `DecodeRounds`
and `Postprocessor` (tokens back to the host)."""

from __future__ import annotations

from nvllm.config import SchedulerConfig
from nvllm.scheduler.admission import Admission
from nvllm.scheduler.batch import ScheduledBatch
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.decode import DecodeRounds
from nvllm.scheduler.events import SchedulerEvent
from nvllm.scheduler.lifecycle import SequenceLifecycle
from nvllm.scheduler.policy import SchedulingPolicy, WaitingQueue
from nvllm.scheduler.postprocess import Postprocessor
from nvllm.scheduler.sequence import Sequence
from nvllm.scheduler.stops import StopChecker
from nvllm.scheduler.token_rows import TokenRows


class Scheduler:
    def __init__(self, config: SchedulerConfig, block_manager: BlockManager, eos_token_ids: tuple[int, ...]):
        self.config = config
        self.block_manager = block_manager
        self.stops = stops = StopChecker(eos_token_ids, config.max_model_len)
        policy = SchedulingPolicy(config.policy)
        self.lifecycle = SequenceLifecycle(policy, block_manager, TokenRows(config.max_num_seqs))
        self.admission = Admission(config, self.lifecycle)
        self.decode = DecodeRounds(config, self.lifecycle, stops)
        self.postprocessor = Postprocessor(self.lifecycle, stops)
        self.streaming = False  # see set_streaming
        self.prefilled_last = False  # whether the last batch scheduled was a prefill (see _decode_turn)

    @property
    def running(self) -> list[Sequence]:
        return self.lifecycle.running

    @property
    def waiting(self) -> WaitingQueue:
        return self.lifecycle.waiting

    @property
    def num_preemptions(self) -> int:
        return self.lifecycle.num_preemptions

    @property
    def num_generated_tokens(self) -> int:
        """Sampled tokens kept (those sampled after a stop are not)."""
        return self.postprocessor.num_generated_tokens

    @property
    def pending_block_copies(self) -> list[tuple[int, int]]:
        """Block copies the next batch runs first (see `ScheduledBatch.block_copies`)."""
        return self.lifecycle.pending_block_copies

    def add(self, seq: Sequence) -> None:
        self.lifecycle.waiting.add(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def set_streaming(self, streaming: bool) -> None:
        """While a stream wants each token as it is sampled (the engine then hands out a round's tokens
        step by step, see `LLMEngine.set_streaming`): decode rounds of one step while few sequences run
        (`scheduler.one_step_rounds_max_seqs`) and the prompts that wait (none, mostly) have room, so that a
        prompt that arrives waits for no round to end; else full rounds: with many sequences the host's
        work for every step of each would slow the steps, and prompts that wait for room wait anyway, as
        `generate`'s do, to be admitted together as a round ends."""
        self.streaming = streaming

    def _one_step_rounds(self) -> bool:
        return (
            self.streaming
            and len(self.running) <= self.config.one_step_rounds_max_seqs
            and not self.admission.more_waiting_than_room()
        )

    def _decode_turn(self) -> bool:
        """Whether this step decodes before any prompt is admitted: while streams take rounds of one step, a
        prefill step is followed by a decode step of the sequences that decode, so that prompts arriving
        one after another (each admitted as it comes) cannot hold the streams' tokens back for prefill step
        after prefill step."""
        return (
            self.prefilled_last
            and bool(self.running)
            and self._one_step_rounds()
            and all(seq.num_uncomputed_tokens <= 1 for seq in self.running)  # none half prefilled
        )

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch() if self._decode_turn() else self.admission.schedule()
        if not batch.seqs:
            self.decode.one_step = self._one_step_rounds()
            batch = self.decode.schedule()
        batch.block_copies = self.lifecycle.take_block_copies()
        self.prefilled_last = batch.is_prefill
        return batch

    def schedule_next_round(self, in_flight: ScheduledBatch) -> ScheduledBatch | None:
        """The decode round to launch while `in_flight` (launched, see `launched`) still runs (see
        `DecodeRounds.next_round`); a sequence that stops inside `in_flight` (EOS) wastes its steps of this
        round, which `postprocess` drops. None where the next step needs the host to know the tokens first:
        a prompt to admit, a sequence to preempt, one that did not take part in `in_flight`."""
        if in_flight.is_prefill or self.admission.can_admit():
            return None
        self.decode.one_step = self._one_step_rounds()
        batch = self.decode.next_round()
        if batch is not None:
            self.prefilled_last = False
        return batch

    def launched(self, batch: ScheduledBatch) -> None:
        self.postprocessor.launched(batch)

    def postprocess(
        self,
        batch: ScheduledBatch,
        sampled_token_ids: list[list[int]],
        sampled_logprobs: list[list[dict[int, float]]] | None = None,
        prompt_logprobs: list[list[dict[int, float]]] | None = None,
        first_step: int = 0,
    ) -> list[Sequence]:
        """The finished sequences (see `Postprocessor.postprocess`)."""
        return self.postprocessor.postprocess(
            batch, sampled_token_ids, sampled_logprobs, prompt_logprobs, first_step
        )

    def take_events(self) -> list[SchedulerEvent]:
        """What happened to requests since the last call, in order (the engine hands them on)."""
        return self.lifecycle.take_events()

    def abort(self, seq: Sequence) -> None:
        """Drop one request's sequence (see `SequenceLifecycle.abort`)."""
        self.lifecycle.abort(seq)

    def abort_all(self) -> None:
        """Drop every request (after an error: the engine stays usable)."""
        self.lifecycle.abort_all()
