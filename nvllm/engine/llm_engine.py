from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence as SequenceLike

from tqdm.auto import tqdm

from nvllm.attention.cascade import decode_kv_reads
from nvllm.config import EngineConfig, resolve
from nvllm.engine.block_manager import BlockManager
from nvllm.engine.compile_cache import save_cache_artifacts
from nvllm.engine.graph_runner import decode_capture_sizes
from nvllm.engine.launched_batch import LaunchedBatch
from nvllm.engine.memory import check_fits, kv_bytes_per_block, weight_bytes
from nvllm.engine.model_runner import DTYPES, ModelRunner
from nvllm.engine.requests import Prompt, check_request, paired, token_ids_of
from nvllm.engine.scheduler import ScheduledBatch, Scheduler
from nvllm.engine.sequence import Sequence
from nvllm.engine.step_inputs import StepInputBuilder
from nvllm.layers.sampler import Sampler
from nvllm.models import model_class
from nvllm.profiling import make_profiler
from nvllm.sampling_params import SamplingParams
from nvllm.tokenizer import load_tokenizer
from nvllm.utilization import ModelWork, WorkCounter, device_peak, utilization_stats

logger = logging.getLogger("nvllm")


def tokens_per_second(num_tokens: int, seconds: float) -> float:
    return num_tokens / seconds if seconds > 0 else 0.0


class LLMEngine:
    """Continuous batching: requests in, one scheduled batch per `step()`, finished sequences out."""

    def __init__(self, config: EngineConfig):
        self.config = config = resolve(config)
        model_class(config.model.architecture)  # an unsupported architecture fails before any loading
        check_fits(config, DTYPES[config.model.dtype], config.device)  # as does a model too large
        start = time.perf_counter()
        self.tokenizer = load_tokenizer(config.model.path)
        self.model_runner = self._make_model_runner()
        self.device = self.model_runner.device
        self.block_manager = BlockManager(
            self.model_runner.num_blocks, config.cache.block_size, config.cache.enable_prefix_caching
        )
        self.profiler = make_profiler(config.profile, self.device)
        self.scheduler = Scheduler(
            config.scheduler, self.block_manager, config.model.eos_token_id, profiler=self.profiler
        )
        self.profiler.watch(self.scheduler, self.block_manager)
        dtype = DTYPES[config.model.dtype]
        self.work = WorkCounter(ModelWork.of(config.model, dtype))
        self.device_peak = device_peak(self.device, dtype)
        self.inputs = StepInputBuilder(
            self.model_runner.backend,
            self.block_manager,
            config.scheduler.max_num_seqs,
            decode_capture_sizes(config),
        )
        timings = dict(self.model_runner.timings)
        self.sampler = Sampler(compiled=config.compile.enabled and self.device.startswith("cuda"))
        if self.sampler.compiled:
            compile_start = time.perf_counter()
            self.sampler.warm_up(config.model.vocab_size, self.model_runner.dtype, self.device)
            timings["compile_s"] += time.perf_counter() - compile_start
        if config.compile.enabled:
            save_cache_artifacts(config.compile.cache_artifacts)  # after the last compile (rank 0's)
        self.startup_timings = {**timings, "startup_s": time.perf_counter() - start}
        self._log_startup()
        self.num_prefill_tokens = self.num_decode_tokens = 0
        self.decode_kv_tokens_read = self.decode_kv_tokens_read_plain = 0  # see decode_kv_reads
        self.in_flight: LaunchedBatch | None = None  # a decode round launched ahead of its turn
        self._generating = threading.Lock()
        self.prefill_seconds = self.decode_seconds = 0.0
        self.profiler.set_memory(
            weight_bytes(config, dtype),
            self.block_manager.num_blocks * kv_bytes_per_block(config, dtype),
            self.model_runner.cuda_graph_pool_bytes,
        )

    def _log_startup(self) -> None:
        blocks, block_size = self.block_manager.num_blocks, self.config.cache.block_size
        max_len = self.config.scheduler.max_model_len
        timings = ", ".join(f"{name[:-2]} {seconds:.1f}s" for name, seconds in self.startup_timings.items())
        logger.info(
            "KV cache: %d blocks of %d tokens (%d tokens; %d sequences of max_model_len=%d at once); %s",
            blocks,
            block_size,
            blocks * block_size,
            blocks // self.block_manager.blocks_for(max_len),
            max_len,
            timings,
        )

    def _make_model_runner(self):
        if self.config.parallel.tensor_parallel_size > 1:
            from nvllm.engine.tensor_parallel import TensorParallelRunner

            return TensorParallelRunner(self.config)
        return ModelRunner(self.config)

    # ---- requests -----------------------------------------------------------------------------------
    def validate(self, token_ids: list[int], params: SamplingParams) -> None:
        """Reject a request the engine could never serve, before it changes any state."""
        check_request(token_ids, params, self.config, self.block_manager)

    def add_request(self, prompt: Prompt, sampling_params: SamplingParams) -> Sequence:
        self.profiler.lap("other")
        token_ids = token_ids_of(prompt, self.tokenizer)
        self.validate(token_ids, sampling_params)
        seq = self._enqueue(token_ids, sampling_params)
        self.profiler.lap("add_requests")
        return seq

    def _enqueue(self, token_ids: list[int], sampling_params: SamplingParams) -> Sequence:
        seq = Sequence(token_ids, sampling_params)
        self.scheduler.add(seq)
        self.profiler.request_arrived(seq)
        return seq

    # ---- the loop -----------------------------------------------------------------------------------
    def step(self) -> list[Sequence]:
        """Run one batch to its tokens (one prefill step or a round of decode steps), and return the
        sequences that finished. This is the one place that overlaps rounds: with
        `scheduler.overlap_rounds`, the decode round after the current one is launched before the current
        one's tokens are read, so that the host's work between rounds overlaps the device's. The next
        round's first step reads the current round's last tokens from the device's token table, as every
        decode step does."""
        profiler = self.profiler
        profiler.step_started()
        start = time.perf_counter()
        current, self.in_flight = self.in_flight, None
        if current is None:
            batch = self.scheduler.schedule()
            profiler.lap("schedule")
            if not batch.seqs:
                raise RuntimeError("scheduler found nothing to run although requests are pending")
            current = self.launch(batch)
        if self.config.scheduler.overlap_rounds:
            following = self.scheduler.schedule_next_round(current.batch)
            profiler.lap("schedule")
            if following is not None:
                self.in_flight = self.launch(following)
        generated_before = self.scheduler.num_generated_tokens
        sampled_tokens = current.sampled_tokens()
        profiler.lap("wait_collect")
        finished = self.scheduler.postprocess(current.batch, sampled_tokens)
        if self.in_flight is not None and all(seq.is_finished for seq in self.in_flight.batch.seqs):
            self.in_flight = None  # every sequence of it stopped: nothing it computes is kept
        elapsed = time.perf_counter() - start
        if current.batch.is_prefill:
            num_tokens = current.batch.num_tokens
            self.num_prefill_tokens += num_tokens
            self.prefill_seconds += elapsed
        else:
            num_tokens = self.scheduler.num_generated_tokens - generated_before
            self.num_decode_tokens += num_tokens
            self.decode_seconds += elapsed
        profiler.step_finished(current.batch, num_tokens, finished)
        return finished

    def launch(self, batch: ScheduledBatch) -> LaunchedBatch:
        """Queue every step of `batch` on the device and start copying its sampled tokens to the host;
        nothing here waits for the device."""
        profiler = self.profiler
        steps = self.inputs.build(batch)
        if not batch.is_prefill:
            for step in steps:
                read, plain = decode_kv_reads(step.seqlens_k, step.cascade)
                self.decode_kv_tokens_read += read
                self.decode_kv_tokens_read_plain += plain
        profiler.lap("build_inputs")
        seqs = batch.sampled_seqs
        sampling = self.sampler.prepare(
            [seq.sampling_params for seq in seqs],
            [seq.generator for seq in seqs],
            self.device,
            num_rows=steps[0].num_logits,
            num_steps=None if batch.is_prefill else batch.num_new_tokens,
        )
        profiler.lap("sample")
        self.work.add(batch)
        profiler.launch_started(batch)
        sample = profiler.timed(
            lambda logits, step: self.sampler.sample(logits, sampling, step), "launch", "sample"
        )
        tokens = self.model_runner.execute(steps, sample)
        profiler.launch_finished(batch)
        self.scheduler.launched(batch)
        launched = LaunchedBatch(batch, tokens, self.model_runner.wait_for_device)
        profiler.lap("launch")
        return launched

    def is_finished(self) -> bool:
        return self.scheduler.is_finished()

    def abort_all(self) -> None:
        """Drop every pending request and its KV blocks (after an error: the engine stays usable)."""
        self.in_flight = None  # its work on the device ends before any later batch's begins
        self.scheduler.abort_all()

    def generate(
        self,
        prompts: SequenceLike[Prompt],
        sampling_params: SamplingParams | SequenceLike[SamplingParams],
        use_tqdm: bool = True,
    ) -> list[dict]:
        """Generate for every prompt; one `{"text", "token_ids"}` per prompt, in input order. All or nothing:
        every request is checked before any is queued. Calls from several threads run one after another."""
        with self._generating:
            return self._generate(prompts, sampling_params, use_tqdm)

    def _generate(self, prompts, sampling_params, use_tqdm: bool) -> list[dict]:
        self.profiler.generate_started()
        requests = [(token_ids_of(p, self.tokenizer), sp) for p, sp in paired(prompts, sampling_params)]
        for token_ids, params in requests:  # all checked before any is queued
            self.validate(token_ids, params)
        try:
            seqs = [self._enqueue(token_ids, params) for token_ids, params in requests]
            self.profiler.lap("add_requests")
            self._run_until_done(len(seqs), use_tqdm)
        finally:
            self.abort_all()
        outputs = [
            {"text": self.tokenizer.decode(seq.completion_token_ids), "token_ids": seq.completion_token_ids}
            for seq in seqs
        ]
        self.profiler.lap("detokenize")
        self.profiler.generate_finished()
        return outputs

    def _run_until_done(self, num_requests: int, use_tqdm: bool) -> None:
        progress = tqdm(total=num_requests, desc="Generating", dynamic_ncols=True, disable=not use_tqdm)
        start = (self.num_prefill_tokens, self.prefill_seconds, self.num_decode_tokens, self.decode_seconds)

        def rate(tokens: int, seconds: float) -> str:
            return f"{tokens_per_second(tokens, seconds):.0f}tok/s"

        with progress:
            while not self.is_finished():
                finished = self.step()
                progress.update(len(finished))
                progress.set_postfix(
                    prefill=rate(self.num_prefill_tokens - start[0], self.prefill_seconds - start[1]),
                    decode=rate(self.num_decode_tokens - start[2], self.decode_seconds - start[3]),
                    refresh=False,
                )

    def stats(self) -> dict:
        stats = {
            "num_kv_blocks": self.block_manager.num_blocks,
            "num_preemptions": self.scheduler.num_preemptions,
            "prefix_cache_hit_rate": self.block_manager.prefix_hit_rate,
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
        if getattr(self, "model_runner", None) is not None:
            self.abort_all()
            self.model_runner.shutdown()
            self.model_runner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass
