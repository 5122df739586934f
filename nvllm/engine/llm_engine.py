"""The engine: start-up, request intake, and the loop that runs one scheduled batch per `step()`. The
offline calls built on it (generate, stream, chat) are `LLM`'s (nvllm/llm.py); every public entry point
holds the engine's lock (nvllm/engine/ownership.py)."""

from __future__ import annotations

import gc
import time
import warnings
from dataclasses import dataclass, field

from nvllm.attention.cascade import decode_kv_reads
from nvllm.config import EngineConfig
from nvllm.engine.batch_sampling import batch_sampling, requested_logprobs
from nvllm.engine.cascade_switch import check_cascade_switch
from nvllm.engine.config_resolution import resolve
from nvllm.engine.launched_batch import LaunchedBatch, SampledSteps
from nvllm.engine.new_sequence import new_sequence
from nvllm.engine.ownership import EngineOwnership
from nvllm.engine.rates import tokens_per_second
from nvllm.engine.request_validation import (
    Prompt,
    check_priority,
    check_request,
    check_token_filters,
    token_ids_of,
)
from nvllm.engine.scheduler_records import hand_on_scheduler_events
from nvllm.engine.startup import freeze_startup_objects, log_startup, make_model_runner
from nvllm.engine.step_builder import StepInputBuilder
from nvllm.engine.structured_outputs import StructuredOutputs
from nvllm.models import model_class
from nvllm.profiling import make_profiler
from nvllm.profiling.utilization import ModelWork, WorkCounter, device_peak, utilization_stats
from nvllm.runner.compile_cache import save_cache_artifacts
from nvllm.runner.dtypes import DTYPES, kv_cache_dtype
from nvllm.runner.memory import check_fits, kv_bytes_per_block, weight_bytes
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.scheduler import ScheduledBatch, Scheduler
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.tokenizer import load_tokenizer


@dataclass
class RoundInHand:
    """A launched batch whose tokens the engine hands out (see `LLMEngine.set_streaming`), and what its
    steps handed out so far kept and finished (the profiler records the batch once all are out)."""

    launched: LaunchedBatch
    num_tokens: int = 0
    finished: list[Sequence] = field(default_factory=list)


class LLMEngine:
    """Continuous batching: requests in, one scheduled batch per `step()`, finished sequences out."""

    def __init__(self, config: EngineConfig):
        self._ownership = EngineOwnership()
        self.config = config = resolve(config)
        model_class(config.model.architecture)  # an unsupported architecture fails before any loading
        check_fits(config, DTYPES[config.model.dtype], config.device)  # as does a model too large
        start = time.perf_counter()
        self.tokenizer = load_tokenizer(config.model.path)
        self.structured_outputs = StructuredOutputs(self.tokenizer, config.model)
        self.model_runner = make_model_runner(config)
        self.device = self.model_runner.device
        self.block_manager = BlockManager(
            self.model_runner.num_blocks, config.cache.block_size, config.cache.enable_prefix_caching
        )
        self.profiler = make_profiler(config.profile, self.device)
        self.scheduler = Scheduler(config.scheduler, self.block_manager, config.model.eos_token_ids)
        self.profiler.watch(self.scheduler, self.block_manager)
        dtype = DTYPES[config.model.dtype]
        self.work = WorkCounter(ModelWork.of(config.model, dtype, kv_cache_dtype(config.cache.dtype, dtype)))
        self.device_peak = device_peak(self.device, dtype)
        self.inputs = StepInputBuilder(
            self.model_runner.backend,
            self.block_manager,
            config.scheduler.max_num_seqs,
            self.model_runner.graph_plan,
        )
        if config.compile.enabled:
            save_cache_artifacts(config.compile.cache_artifacts)  # after the last compile (rank 0's)
        self.startup_timings = {**self.model_runner.timings, "startup_s": time.perf_counter() - start}
        log_startup(config, self.block_manager, self.startup_timings)
        self.num_prefill_tokens = self.num_decode_tokens = 0
        self.decode_kv_tokens_read = self.decode_kv_tokens_read_plain = 0  # see decode_kv_reads
        self.in_flight: LaunchedBatch | None = None  # a decode round launched ahead of its turn
        self.in_hand: RoundInHand | None = None  # the batch whose tokens the engine is handing out
        self._hands_out_steps = False  # see set_streaming
        self._step_failed = False  # a step raised part-way: its sequences' state is unknown until abort_all
        self._warned_priority_ignored = False
        self.prefill_seconds = self.decode_seconds = 0.0
        self.last_batch_size = 0  # sequences in the last step's batch (the terminal panel shows it)
        self.profiler.set_memory(
            weight_bytes(config, dtype),
            self.block_manager.num_blocks * kv_bytes_per_block(config, dtype),
            self.model_runner.cuda_graph_pool_bytes,
        )
        freeze_startup_objects()  # shutdown() unfreezes them

    # ---- requests -----------------------------------------------------------------------------------
    def validate(self, token_ids: list[int], params: SamplingParams) -> None:
        """Reject a request the engine could never serve, or would serve at a cost above its caps, before
        it changes any state."""
        check_request(token_ids, params, self.config, self.block_manager)
        check_token_filters(params, self.config.model.vocab_size, self.tokenizer)
        self.structured_outputs.check(params)

    def add_request(self, prompt: Prompt, sampling_params: SamplingParams, priority: int = 0) -> Sequence:
        """Queue one request (`priority`: lower is served first under `scheduler.policy=priority`); its
        samples beyond the first (`n`) are the returned sequence's `forks` until its prompt is computed."""
        with self._ownership.call():
            self.profiler.lap("other")
            token_ids = token_ids_of(prompt, self.tokenizer)
            self.validate(token_ids, sampling_params)
            seq = self._enqueue(token_ids, sampling_params, check_priority(priority))
            self.profiler.lap("add_requests")
            return seq

    def _enqueue(self, token_ids: list[int], params: SamplingParams, priority: int = 0) -> Sequence:
        if priority != 0 and self.config.scheduler.policy == "fcfs" and not self._warned_priority_ignored:
            self._warned_priority_ignored = True
            warnings.warn(
                "priority is ignored under scheduler.policy=fcfs: set scheduling_policy='priority' "
                "(scheduler.policy=priority) to serve requests by priority",
                stacklevel=3,
            )
        seq = new_sequence(token_ids, params, priority, self.tokenizer)
        self.structured_outputs.attach(seq)
        self.scheduler.add(seq)
        self.profiler.request_arrived(seq)
        return seq

    # ---- the loop -----------------------------------------------------------------------------------
    def step(self) -> list[Sequence]:
        """Run one batch to its tokens (one prefill step or a round of decode steps), and return the
        sequences that finished. After a step that raised, the engine refuses to step until `abort_all`."""
        with self._ownership.call():
            return self._step()

    def _step(self) -> list[Sequence]:
        if self._step_failed:
            raise RuntimeError(
                "a step of this engine failed part-way, leaving its requests in an unknown state: call "
                "abort_all() to drop them before stepping again"
            )
        try:
            return self._run_step()
        except BaseException:
            self._step_failed = True
            raise

    def _run_step(self) -> list[Sequence]:
        """One step: a prefill, or a decode round's steps, all of them or, while a stream wants each token
        as it is sampled (`set_streaming`), the next one only, the round's later steps running on meanwhile.
        This is the one place that overlaps rounds: with `scheduler.overlap_rounds`, the decode round after
        the current one is launched before the current one's tokens are read, so that the host's work
        between rounds overlaps the device's. The next round's first step reads the current round's last
        tokens from the device's token table, as every decode step does."""
        profiler = self.profiler
        start = time.perf_counter()
        if self.in_hand is None:
            profiler.step_started()
            self.in_hand = RoundInHand(self._launch_next())
        else:
            profiler.lap("other")
        in_hand = self.in_hand
        current = in_hand.launched
        generated_before = self.scheduler.num_generated_tokens
        first_step = current.steps_taken
        num_steps = 1 if self._hands_out_steps else current.num_steps - first_step
        sampled_tokens, sampled_logprobs = current.take_tokens(num_steps)
        profiler.lap("wait_collect")
        finished = self.scheduler.postprocess(
            current.batch, sampled_tokens, sampled_logprobs, current.prompt_logprobs(), first_step
        )
        hand_on_scheduler_events(self.scheduler, self.profiler)
        elapsed = time.perf_counter() - start
        self.last_batch_size = len(current.batch.seqs)
        if current.batch.is_prefill:
            num_tokens = current.batch.num_tokens
            self.num_prefill_tokens += num_tokens
            self.prefill_seconds += elapsed
        else:
            num_tokens = self.scheduler.num_generated_tokens - generated_before
            self.num_decode_tokens += num_tokens
            self.decode_seconds += elapsed
        in_hand.num_tokens += num_tokens
        in_hand.finished += finished
        if current.all_taken or all(seq.is_finished for seq in current.batch.seqs):
            self.in_hand = None  # its steps left compute nothing that is kept
            profiler.step_finished(current.batch, in_hand.num_tokens, in_hand.finished)
        else:
            profiler.lap("postprocess")
        self._drop_finished_rounds()
        return finished

    def _launch_next(self) -> LaunchedBatch:
        """The batch whose tokens come next: the round launched ahead of its turn, or the scheduler's next
        batch, launched now; with `scheduler.overlap_rounds`, the round after it is launched before its
        tokens are read."""
        current, self.in_flight = self.in_flight, None
        if current is None:
            batch = self.scheduler.schedule()
            hand_on_scheduler_events(self.scheduler, self.profiler)
            self.profiler.lap("schedule")
            if not batch.seqs:
                raise RuntimeError("scheduler found nothing to run although requests are pending")
            current = self.launch(batch)
        if self.config.scheduler.overlap_rounds:
            following = self.scheduler.schedule_next_round(current.batch)
            self.profiler.lap("schedule")
            if following is not None:
                self.in_flight = self.launch(following)
        return current

    def set_streaming(self, streaming: bool) -> None:
        """While a stream wants each token as it is sampled: each `step()` hands out one model step's tokens,
        a decode round's later steps running on the device meanwhile, and the scheduler picks the rounds'
        lengths for streams (`Scheduler.set_streaming`). Off: a step hands out a whole round's tokens (the
        rest of the round in hand, if one is)."""
        self._hands_out_steps = streaming
        self.scheduler.set_streaming(streaming)

    def launch(self, batch: ScheduledBatch) -> LaunchedBatch:
        """Queue every step of `batch` on the device, each step's sampled tokens copied to the host as they
        are sampled; nothing here waits for the device."""
        profiler = self.profiler
        steps = self.inputs.build(batch)
        if not batch.is_prefill:
            for step in steps:
                read, plain = decode_kv_reads(step.seqlens_k, step.cascade)
                self.decode_kv_tokens_read += read
                self.decode_kv_tokens_read_plain += plain
        profiler.lap("build_inputs")
        sampling = batch_sampling(
            batch, steps[0].num_logits, self.config.model, self.device, self.model_runner.wait_for_device
        )
        profiler.lap("sample")
        self.work.add(batch)
        logprobs, num_logprobs = requested_logprobs(batch, sampling, self.config.model.vocab_size)
        sampled = SampledSteps(logprobs)
        profiler.launch_started(batch)
        self.model_runner.execute(
            steps, sampling, lambda sample: sampled.recording(profiler.timed(sample, "launch", "sample"))
        )
        profiler.launch_finished(batch)
        self.scheduler.launched(batch)
        launched = LaunchedBatch(
            batch, sampled, self.model_runner.wait_for_device, num_logprobs, sampling.step_prompt_logprobs
        )
        profiler.lap("launch")
        return launched

    def is_finished(self) -> bool:
        return self.scheduler.is_finished()

    def abort(self, samples: list[Sequence]) -> None:
        """Drop one request: `samples` are the sequence `add_request` returned and its forks as they were
        then (forks leave `Sequence.forks` when they start). Their KV blocks and token-table rows are free
        when this returns; the other requests run on."""
        with self._ownership.call():
            for seq in samples:
                self.scheduler.abort(seq)
            self._drop_finished_rounds()
            hand_on_scheduler_events(self.scheduler, self.profiler)

    def _drop_finished_rounds(self) -> None:
        """Forget the rounds of which every sequence stopped (or was aborted): nothing they compute is
        kept."""
        if self.in_flight is not None and all(seq.is_finished for seq in self.in_flight.batch.seqs):
            self.in_flight = None
        if self.in_hand is not None and all(seq.is_finished for seq in self.in_hand.launched.batch.seqs):
            self.in_hand = None

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache's blocks (a benchmark's cold start); False, changing nothing, while
        requests hold blocks."""
        with self._ownership.call():
            return self.scheduler.block_manager.reset_prefix_cache()

    def abort_all(self) -> None:
        """Drop every pending request and its KV blocks (after an error: the engine stays usable)."""
        with self._ownership.call():
            self._abort_all()

    def _abort_all(self) -> None:
        self.in_flight = self.in_hand = None  # their work on the device ends before any later batch's begins
        self.scheduler.abort_all()
        self._step_failed = False
        hand_on_scheduler_events(self.scheduler, self.profiler)

    def set_cascade(self, mode: str) -> None:
        """Decode by cascade attention as `attention.cascade=mode` says (auto | on | off), from the next
        batch on (`config` stays the one the engine started with). A compiled engine started with it off
        compiled and captured no cascade graphs: it stays off (see check_cascade_switch)."""
        check_cascade_switch(self.config, mode)
        with self._ownership.call():  # never between the rounds of a running call
            self.model_runner.backend.cascade = mode  # the step builder plans with this same backend object

    def stats(self) -> dict:
        """Token and time counters, start-up timings, and the model work and utilization they imply."""
        stats = {
            "num_kv_blocks": self.block_manager.num_blocks,
            "num_preemptions": self.scheduler.num_preemptions,
            "prefix_cache_hit_rate": self.block_manager.prefix_hit_rate,
            "prefix_cache_queried_tokens": self.block_manager.num_queried_tokens,  # prompt tokens looked up
            "prefix_cache_hit_tokens": self.block_manager.num_hit_tokens,  # of those, found cached
            "prefill_tokens": self.num_prefill_tokens,
            "decode_tokens": self.num_decode_tokens,
            # KV tokens decode steps read (per layer), and what they would read without cascade attention
            "decode_kv_tokens_read": self.decode_kv_tokens_read,
            "decode_kv_tokens_read_plain": self.decode_kv_tokens_read_plain,
            "prefill_s": self.prefill_seconds,
            "decode_s": self.decode_seconds,
            "prefill_tok_per_s": tokens_per_second(self.num_prefill_tokens, self.prefill_seconds),
            "decode_tok_per_s": tokens_per_second(self.num_decode_tokens, self.decode_seconds),
            **self.startup_timings,
            **self.work.stats(),
        }
        num_devices = self.config.parallel.tensor_parallel_size
        return {**stats, **utilization_stats(stats, self.device_peak, num_devices)}

    def shutdown(self) -> None:
        """Release the device memory and the workers once the call another thread runs has ended (at once
        from the loop of this thread's stream, which then ends); every later call raises."""
        ownership = getattr(self, "_ownership", None)
        if ownership is None or ownership.is_shut_down:
            return
        if ownership.owns_suspended_stream():
            self._release()
        else:
            with ownership.call():
                self._release()

    def _release(self) -> None:
        self._ownership.is_shut_down = True
        if getattr(self, "model_runner", None) is not None:
            self._abort_all()
            self.model_runner.shutdown()
            self.model_runner = None
            gc.unfreeze()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass
