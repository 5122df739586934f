"""LaunchedBatch on CUDA tensors: each step's host copy has its CUDA event, and taking steps waits, through
`wait_for_device`, for the last taken step's event only: not for the steps after it."""

import pytest
import torch

from nvllm.engine.launched_batch import LaunchedBatch, SampledSteps
from tests.engine.test_launched_batch import TOKENS, decode_batch, sampled_steps


@pytest.mark.gpu
def test_cuda_tokens_are_read_step_by_step_after_waiting_for_each_steps_copy():
    waited = []

    def wait_for_device(event: torch.cuda.Event) -> None:
        waited.append(event)
        event.synchronize()

    sampled = sampled_steps(TOKENS.cuda())
    launched = LaunchedBatch(decode_batch(), sampled, wait_for_device)
    assert launched.take_tokens(1)[0] == [[11], [21], [31]]
    assert waited == [sampled.copied[0]]
    assert launched.take_tokens(1)[0] == [[13], [22], [32]]
    assert waited == sampled.copied and all(isinstance(event, torch.cuda.Event) for event in waited)


@pytest.mark.gpu
def test_taking_a_step_does_not_wait_for_the_work_queued_after_it():
    """The first step's tokens are read while work queued after its copy (the round's later steps) runs.
    As in a running engine, the host copies take pinned blocks the caching allocator already holds."""
    for _ in range(4):
        torch.empty(TOKENS.shape[0], dtype=TOKENS.dtype, pin_memory=True)  # freed at once: cached
    # made before the work: a copy from pageable host memory waits for everything queued before it
    first, second = TOKENS[:, 0].cuda(), TOKENS[:, 1].cuda()
    sampled = SampledSteps()
    sampled.add(first)
    busy = torch.randn(4096, 4096, device="cuda")
    for _ in range(200):  # tens of milliseconds of work after the first step's copy
        busy = busy @ busy
        busy = busy / busy.norm()
    sampled.add(second)
    launched = LaunchedBatch(decode_batch(), sampled, lambda event: event.synchronize())
    assert launched.take_tokens(1)[0] == [[11], [21], [31]]
    assert not sampled.copied[1].query()  # the later work still runs
    assert launched.take_tokens(1)[0] == [[13], [22], [32]]
