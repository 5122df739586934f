"""What the engine needs of a runner, and nothing more: `ModelRunner` (one process) and
`TensorParallelRunner` (rank 0 driving worker ranks) both keep it, so the engine and the experiments never
depend on which one they hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from nvllm.attention.backend import AttentionBackend
from nvllm.runner.graph_plan import GraphPlan
from nvllm.runner.step_inputs import StepInputs
from nvllm.sampling.sampler import SamplingBatch

# A step's sampling: (logits, step of the round) -> one token per logits row, on the device
Sample = Callable[[torch.Tensor, int], torch.Tensor]


@runtime_checkable
class Runner(Protocol):
    """Runs a batch's steps on the model and samples their tokens. The attributes are fixed at start-up
    (the backend's `cascade` mode excepted: `LLMEngine.set_cascade` changes it)."""

    device: str  # rank 0's device: where `execute` leaves its tokens and the engine prepares sampling data
    dtype: torch.dtype  # the model's (and so the logits') dtype
    backend: AttentionBackend  # the step builder plans steps with this same object
    num_blocks: int  # KV-cache blocks per rank
    # start-up seconds: load_s, compile_s (the sampler's and the prefill warm-up's included), capture_s
    timings: dict[str, float]
    cuda_graph_pool_bytes: int | None  # device memory the CUDA-graph capture reserved (None: no capture)
    weight_bytes: int  # bytes of the model's parameters and buffers (rank 0's shard)
    graph_plan: GraphPlan  # the step shapes its CUDA graphs hold, which the step builder pads to

    def execute(
        self,
        steps: list[StepInputs],
        sampling: SamplingBatch,
        wrap_sample: Callable[[Sample], Sample] | None = None,
    ) -> torch.Tensor:
        """Queue every step of a batch on the device and sample each step's tokens with `sampling`; returns
        them `[logits rows, steps]` on the device, without waiting for it. `wrap_sample` wraps the runner's
        sampling of a step (the profiler times it; the engine queues the step's copy to the host after it)."""
        ...

    def wait_for_device(self, event: torch.cuda.Event) -> None:
        """Wait for `event` (recorded after `execute`'s work), raising if the runner broke meanwhile."""
        ...

    def shutdown(self) -> None:
        """Release the model, its KV cache and graphs (and every other rank)."""
        ...


def runner_attributes() -> list[str]:
    """The names of the attributes `Runner` declares."""
    return list(Runner.__annotations__)
