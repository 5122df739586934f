"""LaunchedBatch on CUDA tensors: the host copy waits for its CUDA event, once, through `wait_for_device`."""

import pytest
import torch

from nvllm.engine.launched_batch import LaunchedBatch
from tests.engine.test_launched_batch import TOKENS, decode_batch


@pytest.mark.gpu
def test_cuda_tokens_are_read_after_waiting_for_their_copy():
    events = []

    def wait_for_device(event: torch.cuda.Event) -> None:
        events.append(event)
        event.synchronize()

    launched = LaunchedBatch(decode_batch(), TOKENS.cuda(), wait_for_device)
    assert launched.sampled_tokens() == [[11, 13], [21, 22], [31, 32]]
    assert len(events) == 1 and isinstance(events[0], torch.cuda.Event)
