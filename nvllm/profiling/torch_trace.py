"""A torch.profiler trace of some engine steps, each marked as an `nvllm.step` range, for Chrome's trace
viewer or Perfetto."""

from __future__ import annotations

from pathlib import Path

import torch

STEP_RANGE = "nvllm.step"


class TorchTrace:
    """Records the engine steps `start_step` to `start_step + num_steps - 1` (counted by the caller)."""

    def __init__(self, num_steps: int, start_step: int, on_cuda: bool):
        self.num_steps, self.start_step = num_steps, start_step
        self.activities = [torch.profiler.ProfilerActivity.CPU]
        if on_cuda:
            self.activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profile: torch.profiler.profile | None = None
        self._step_range: torch.profiler.record_function | None = None
        self.recording = False

    def step_started(self, step: int) -> None:
        if self.num_steps and step == self.start_step and self._profile is None:
            self._profile = torch.profiler.profile(activities=self.activities)
            self._profile.start()
            self.recording = True
        if self.recording:
            self._step_range = torch.profiler.record_function(STEP_RANGE)
            self._step_range.__enter__()

    def step_finished(self, step: int) -> None:
        if not self.recording:
            return
        self._step_range.__exit__(None, None, None)
        self._step_range = None
        if step + 1 >= self.start_step + self.num_steps:
            self.stop()

    def stop(self) -> None:
        if self.recording:
            if self._step_range is not None:
                self._step_range.__exit__(None, None, None)
                self._step_range = None
            self._profile.stop()
            self.recording = False

    def missing_reason(self, steps_run: int) -> str | None:
        """Why no trace was taken after `steps_run` engine steps; None when one was."""
        if self._profile is not None:
            return None
        if not self.num_steps:
            return "profile.torch_trace_steps=0 asks for none"
        return (
            f"the run had {steps_run} engine steps, fewer than profile.torch_trace_start_step="
            f"{self.start_step}: lower it or run a longer workload"
        )

    def export(self, path: str | Path) -> Path | None:
        """The trace as Chrome/Perfetto JSON at `path` (stopped first); None when none was taken."""
        if self._profile is None:
            return None
        self.stop()
        self._profile.export_chrome_trace(str(path))
        return Path(path)
