"""A batch's tokens from launch to the host: decode rounds' tokens counted in flight while on the device,
then computed tokens accounted, sampled tokens appended up to a stop, a prompt's forks started, and
finished sequences retired."""

from __future__ import annotations

import time

from nvllm.scheduler.batch import ScheduledBatch
from nvllm.scheduler.lifecycle import SequenceLifecycle
from nvllm.scheduler.sequence import Sequence
from nvllm.scheduler.stops import StopChecker


class Postprocessor:
    def __init__(self, lifecycle: SequenceLifecycle, stops: StopChecker):
        self.lifecycle = lifecycle
        self.block_manager = lifecycle.block_manager
        self.stops = stops
        self.num_generated_tokens = 0  # sampled tokens kept (those sampled after a stop are not)

    def launched(self, batch: ScheduledBatch) -> None:
        """The device now computes `batch`: a decode round's tokens are on the device until `postprocess`."""
        if batch.is_prefill:
            return
        for seq, num_steps in zip(batch.seqs, batch.num_new_tokens):
            seq.num_in_flight_tokens += num_steps

    def postprocess(
        self,
        batch: ScheduledBatch,
        sampled_token_ids: list[list[int]],
        sampled_logprobs: list[list[dict[int, float]]] | None = None,
        prompt_logprobs: list[list[dict[int, float]]] | None = None,
        first_step: int = 0,
    ) -> list[Sequence]:
        """Account the computed tokens, append the tokens sampled for each of `batch.sampled_seqs` (in
        that order; with their log-probabilities where asked) up to a stop, and retire finished sequences.
        Returns the finished ones. A decode round's tokens come all at once or a few steps at a time: those
        of its steps from `first_step` on, each sequence keeping those of the steps it took part in; they
        replace the oldest of the sequence's pending ones. A sequence that finished while this round was in
        flight (see `DecodeRounds.next_round`) takes nothing. A prompt's forks start here, on its first
        tokens. `prompt_logprobs`: a prefill's, per sequence of `batch.seqs`, for the prompt positions its
        step computed."""
        finished, sampled = [], iter(range(len(sampled_token_ids)))
        for index, (seq, num_tokens) in enumerate(zip(batch.seqs, batch.num_new_tokens)):
            if prompt_logprobs is not None and seq.prompt_logprobs is not None:
                seq.prompt_logprobs.extend(prompt_logprobs[index])
            if batch.is_prefill and seq.num_uncomputed_tokens > num_tokens:
                # a chunk of a longer prompt: nothing sampled yet
                self.block_manager.mark_computed(seq, seq.computed_len + num_tokens)
                continue
            forks, seq.forks = (seq.forks, []) if batch.is_prefill else ([], seq.forks)
            for fork in forks:  # before the prompt's owner appends a token to its blocks
                self.lifecycle.start_fork(seq, fork)
            for member in (seq, *forks):
                row = next(sampled)
                if member.is_finished:
                    continue
                new_tokens = sampled_token_ids[row]
                if not batch.is_prefill:
                    # none of the steps of the round this sequence sat out
                    new_tokens = new_tokens[: max(0, num_tokens - first_step)]
                    if not new_tokens:
                        continue
                    member.num_in_flight_tokens -= len(new_tokens)
                logprobs = sampled_logprobs[row] if sampled_logprobs is not None else None
                if self._append(member, new_tokens, logprobs):
                    finished.append(member)
        return finished

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
        # the newest token's K/V is written by the step it feeds
        self.block_manager.mark_computed(seq, seq.host_len - 1)
        if stop is None:
            return False
        seq.finish_reason, seq.stop_reason = stop
        seq.finished_time = time.time()
        seq.num_in_flight_tokens = 0  # a round launched after this one computes nothing it keeps
        self.lifecycle.finish(seq)
        return True
