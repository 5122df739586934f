"""The engine's profiler: host time per stage, device time per batch, memory, and the step and request
timelines; optionally a torch.profiler trace of some steps.

The engine calls it at a few points of its loop (`lap` at the end of each stage, `launch_started` /
`launch_finished` around a batch's launch, `step_finished`), and hands it the scheduler's records of
admissions and preemptions. With profiling off the engine holds a `NullProfiler`, whose methods do nothing.

Device time is read without waiting for the device: CUDA events are recorded around a batch's launch
and read once its tokens have reached the host (which they precede on the stream), so profiling adds no
synchronization. With overlapped decode rounds the next round is launched before the current one's tokens
are read: host stages are timed as they happen, so their totals still add up to the time profiled.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import torch

from nvllm.config import ProfileConfig
from nvllm.profiling.live import LiveSteps
from nvllm.profiling.phases import format_phases
from nvllm.profiling.report import format_summary
from nvllm.profiling.stages import StageClock, describe
from nvllm.profiling.timeline import new_request
from nvllm.profiling.torch_trace import TorchTrace

DEVICE_KINDS = {True: "prefill", False: "decode"}  # by ScheduledBatch.is_prefill


class Profiler:
    enabled = True

    def __init__(self, config: ProfileConfig, device: str):
        self.config, self.device = config, device
        self.on_cuda = device.startswith("cuda")
        self._memory: dict[str, int | None] = {}
        self._allocated_at_rest = 0
        self._scheduler = self._block_manager = None
        self._trace: TorchTrace | None = None
        self._live: LiveSteps | None = None
        self.reset()

    # ---- set-up -------------------------------------------------------------------------------------
    def watch(self, scheduler, block_manager) -> None:
        """The engine's scheduler and block manager, whose counters each step record reads."""
        self._scheduler, self._block_manager = scheduler, block_manager

    def set_memory(self, weights_bytes: int, kv_cache_bytes: int, cuda_graph_pool_bytes: int | None) -> None:
        """What the engine holds once it is built; what is allocated then is the baseline of the
        activation peak."""
        self._memory = {
            "weights_bytes": weights_bytes,
            "kv_cache_bytes": kv_cache_bytes,
            "cuda_graph_pool_bytes": cuda_graph_pool_bytes,
        }
        if self.on_cuda:
            self._allocated_at_rest = torch.cuda.memory_allocated(self.device)

    def stream_to(self, live: LiveSteps) -> None:
        """Hand each step's record to `live` as it is recorded (`profile.live`)."""
        self._live = live

    def stop_stream(self) -> None:
        """The stream's queued records written and its thread stopped; no stream from here on."""
        if self._live is not None:
            self._live.close()
            self._live = None

    def reset(self) -> None:
        """Forget everything recorded; a torch trace is taken again from the next step on."""
        if self._live is not None:
            self._live.restart()
        self.origin = time.perf_counter()
        self.clock = StageClock()
        self.device_ms: dict[str, list[float]] = {kind: [] for kind in DEVICE_KINDS.values()}
        self._steps: list[dict] = []
        self._requests: dict[int, dict] = {}
        self._launched: dict[int, tuple[Any, Any, list]] = {}  # id(batch) -> start, end, prompts done
        self._step_start = 0.0
        self._counters_before = (0, 0)
        if self._trace is not None:
            self._trace.stop()
        self._trace = TorchTrace(
            self.config.torch_trace_steps, self.config.torch_trace_start_step, self.on_cuda
        )

    def _now(self) -> float:
        return time.perf_counter() - self.origin

    # ---- host stages --------------------------------------------------------------------------------
    def lap(self, stage: str) -> None:
        self.clock.lap(stage)

    def timed(self, function, before: str, stage: str):
        """`function` with the time until it is called given to `before`, and its own to `stage`."""

        def timed_function(*args):
            self.clock.lap(before)
            result = function(*args)
            self.clock.lap(stage)
            return result

        return timed_function

    def generate_started(self) -> None:
        self.clock.restart()  # the caller's time since the last step is not the engine's
        self._launched.clear()  # left by a `generate` that raised

    def generate_finished(self) -> None:
        self._launched.clear()  # batches launched ahead and dropped (every sequence of them stopped)
        self._trace.stop()

    # ---- batches and steps --------------------------------------------------------------------------
    def _device_mark(self):
        if self.on_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def launch_started(self, batch) -> None:
        prompts_done = batch.sampled_seqs if batch.is_prefill else []  # read before postprocess changes it
        self._launched[id(batch)] = (self._device_mark(), None, prompts_done)

    def launch_finished(self, batch) -> None:
        """Called right after the batch's work is queued (before its tokens' copy to the host)."""
        start, _, prompts_done = self._launched[id(batch)]
        self._launched[id(batch)] = (start, self._device_mark(), prompts_done)

    def step_started(self) -> None:
        self.clock.lap("other")
        self._step_start = self._now()
        self._counters_before = (self._scheduler.num_preemptions, self._block_manager.num_hit_tokens)
        self._trace.step_started(len(self._steps))

    def step_finished(self, batch, num_tokens: int, finished: list) -> None:
        """Record the step of `batch`, postprocessed: `num_tokens` counted, `finished` retired."""
        self.clock.lap("postprocess")
        now = self._now()
        start, end, prompts_done = self._launched.pop(id(batch))
        device_ms = start.elapsed_time(end) if self.on_cuda else (end - start) * 1e3
        kind = DEVICE_KINDS[batch.is_prefill]
        self.device_ms[kind].append(device_ms)
        scheduler, blocks = self._scheduler, self._block_manager
        preemptions_before, hits_before = self._counters_before
        record = {
            "step": len(self._steps),
            "start_s": self._step_start,
            "end_s": now,
            "kind": kind,
            "num_seqs": len(batch.seqs),
            "num_tokens": num_tokens,
            "num_decode_steps": 0 if batch.is_prefill else batch.num_steps,
            "kv_blocks_used": blocks.num_blocks - blocks.num_free_blocks,
            "kv_blocks_free": blocks.num_free_blocks,
            "num_running": len(scheduler.running),
            "num_waiting": len(scheduler.waiting),
            "num_preemptions": scheduler.num_preemptions - preemptions_before,
            "num_prefix_hit_tokens": blocks.num_hit_tokens - hits_before,
            "device_ms": device_ms,
        }
        self._steps.append(record)
        if self._live is not None:
            self._live.put(record)
        for seq in prompts_done:
            if (record := self._requests.get(seq.seq_id)) is not None:
                record["prefill_done_s"].append(now)
                if record["first_token_s"] is None and seq.num_completion_tokens:
                    record["first_token_s"] = now
        for seq in finished:
            if (record := self._requests.get(seq.seq_id)) is not None:
                record["finish_s"], record["output_len"] = now, seq.num_completion_tokens
        self._trace.step_finished(len(self._steps) - 1)
        self.clock.lap("profiler")

    # ---- requests -----------------------------------------------------------------------------------
    def request_arrived(self, seq) -> None:
        self._requests[seq.seq_id] = new_request(seq.seq_id, seq.num_prompt_tokens, self._now())

    def request_scheduled(self, seq) -> None:
        """Admitted (its blocks allocated, its prefix-cache hits known), first or after a preemption."""
        if (record := self._requests.get(seq.seq_id)) is None:
            return
        now = self._now()
        if record["first_scheduled_s"] is None:
            record["first_scheduled_s"] = now
        else:
            record["resumed_s"].append(now)
        record["cached_tokens"] += seq.cached_len

    def request_preempted(self, seq) -> None:
        if (record := self._requests.get(seq.seq_id)) is not None:
            record["preempted_s"].append(self._now())
            record["num_preemptions"] += 1

    # ---- torch trace --------------------------------------------------------------------------------
    def no_trace_reason(self) -> str | None:
        """Why `export_trace` would write nothing; None when a trace was taken."""
        return self._trace.missing_reason(len(self._steps))

    def export_trace(self, path: str | Path) -> Path | None:
        """Write the torch.profiler trace (Chrome/Perfetto JSON) to `path`; None, with a warning saying why,
        when none was taken."""
        if (reason := self.no_trace_reason()) is not None:
            warnings.warn(f"no torch trace written to {path}: {reason}", NoTraceWarning, stacklevel=2)
            return None
        return self._trace.export(path)

    # ---- results ------------------------------------------------------------------------------------
    def steps(self) -> list[dict]:
        return [dict(step) for step in self._steps]

    def requests(self) -> list[dict]:
        return [
            {key: list(value) if isinstance(value, list) else value for key, value in record.items()}
            for record in self._requests.values()
        ]

    def memory(self) -> dict[str, int | None]:
        """Bytes of rank 0: weights, KV cache, CUDA-graph pools (reserved by the capture), and on CUDA the
        peak allocated since the engine started and its excess over what the engine holds at rest (the
        activation peak); what cannot be known on a CPU is None."""
        peak = activation_peak = None
        if self.on_cuda:
            peak = torch.cuda.max_memory_allocated(self.device)
            activation_peak = max(0, peak - self._allocated_at_rest)
        return {**self._memory, "activation_peak_bytes": activation_peak, "peak_allocated_bytes": peak}

    def as_dict(self) -> dict:
        """`stages`: each host stage's count, total, mean, p50, p99 and share of the wall time (the host
        stages' sum); `device`: the same of each batch kind's device time; `memory`: see `memory()`."""
        wall_s = self.clock.total_s
        return {
            "wall_s": wall_s,
            "stages": {stage: describe(seconds, wall_s) for stage, seconds in self.clock.samples.items()},
            "device": {
                kind: describe([ms / 1e3 for ms in values], wall_s) for kind, values in self.device_ms.items()
            },
            "memory": self.memory(),
        }

    def summary(self) -> str:
        return format_summary(self.as_dict()) + "\n" + format_phases(self.steps())


PROFILING_OFF = "profiling is off: LLM(..., profile=True) or profile.enabled=true turns it on"


class NoTraceWarning(UserWarning):
    """`export_trace` had no trace to write."""


class NullProfiler:
    """What the engine holds with profiling off: every call does nothing and nothing is recorded."""

    enabled = False

    def watch(self, scheduler, block_manager) -> None:
        pass

    def set_memory(self, weights_bytes: int, kv_cache_bytes: int, cuda_graph_pool_bytes: int | None) -> None:
        pass

    def lap(self, stage: str) -> None:
        pass

    def timed(self, function, before: str, stage: str):
        return function

    def generate_started(self) -> None:
        pass

    def generate_finished(self) -> None:
        pass

    def launch_started(self, batch) -> None:
        pass

    def launch_finished(self, batch) -> None:
        pass

    def step_started(self) -> None:
        pass

    def step_finished(self, batch, num_tokens: int, finished: list) -> None:
        pass

    def request_arrived(self, seq) -> None:
        pass

    def request_scheduled(self, seq) -> None:
        pass

    def request_preempted(self, seq) -> None:
        pass

    def stop_stream(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def no_trace_reason(self) -> str:
        return PROFILING_OFF

    def export_trace(self, path: str | Path) -> None:
        warnings.warn(f"no torch trace written to {path}: {PROFILING_OFF}", NoTraceWarning, stacklevel=2)
        return None

    def steps(self) -> list[dict]:
        return []

    def requests(self) -> list[dict]:
        return []

    def as_dict(self) -> dict:
        return {"wall_s": 0.0, "stages": {}, "device": {}, "memory": {}}

    def summary(self) -> str:
        return PROFILING_OFF


def make_profiler(config: ProfileConfig, device: str) -> Profiler | NullProfiler:
    return Profiler(config, device) if config.enabled else NullProfiler()
