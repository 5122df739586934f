"""The serving benchmark's load in several client processes, against a stand-in engine's server."""

import pytest

from experiments.runners.serving_client import LoadProcesses
from experiments.studies.serving_http_ceiling import stand_in_server
from nvllm.sampling_params import SamplingParams


def test_shares_of_the_requests_come_back_in_request_order():
    prompts = [[1350] * 4 for _ in range(5)]
    params = [SamplingParams(max_tokens=n + 1, ignore_eos=True) for n in range(5)]
    with stand_in_server(0.002, loop="asyncio", http="h11") as url, LoadProcesses(2) as load:
        timings, duration = load.send(url, "stand-in", prompts, params, [0.0, 0.05, 0.0, 0.0, 0.0])
    assert [timing.error for timing in timings] == [None] * 5
    assert [timing.output_tokens for timing in timings] == [1, 2, 3, 4, 5]
    # the schedule's second gap delays every later request, whichever process sends it (the processes'
    # schedules start together, to within their release from one barrier)
    assert min(t.sent for t in timings[1:]) - timings[0].sent >= 0.04
    assert duration == pytest.approx(max(t.chunk_times[-1] for t in timings) - timings[0].sent)


def test_no_load_processes_is_refused():
    with pytest.raises(ValueError, match="serving.load_processes=0"):
        LoadProcesses(0)
