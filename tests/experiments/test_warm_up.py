"""The harness's warm-up: what it runs before a runner's measured part (the prefill steps' kernels are the
engine start-up's, `tests/runner/test_prefill_warm_up.py`)."""

from __future__ import annotations

from experiments.harness.engine import warm_up


class RecordingLLM:
    """Records the prompts and output lengths of each `generate` call."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, use_tqdm):
        self.calls.append((prompts, params.max_tokens, params.ignore_eos))


def test_the_warm_up_is_one_short_request_as_nano_vllms_bench_has():
    llm = RecordingLLM()
    warm_up(llm)
    assert llm.calls == [([[0] * 8], 2, True)]
