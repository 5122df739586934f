"""On tied top logits, greedy, `top_k=1` and a `top_p` that leaves one token all take the first maximum (as
`argmax` does), whatever else shares the batch: all-greedy, the race without filters, the filtered race."""

import pytest
import torch

from nvllm import SamplingParams
from nvllm.sampling.sampler import Sampler

VOCAB_SIZE = 4096
TIED = [5, 100, 2000, 3000]  # the maximum, four times; the first of them is the answer


def tied_logits(num_rows: int) -> torch.Tensor:
    logits = torch.randn(num_rows, VOCAB_SIZE, generator=torch.Generator().manual_seed(0))
    logits[:, TIED] = 8.0  # each tied token has a probability near 1/4 at temperature 1
    return logits


ONE_TOKEN = {
    "greedy": SamplingParams(temperature=0),
    "top_k=1": SamplingParams(temperature=1.0, top_k=1),
    "top_p leaving one": SamplingParams(temperature=1.0, top_p=0.1),
    "greedy with top_k": SamplingParams(temperature=0, top_k=3),
}
COMPANIONS = {  # what shares the batch decides the path
    "alone": [],
    "race without filters": [SamplingParams(temperature=1.0)],
    "filtered race": [SamplingParams(temperature=1.0, top_k=50)],
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("companions", COMPANIONS.values(), ids=COMPANIONS.keys())
@pytest.mark.parametrize("params", ONE_TOKEN.values(), ids=ONE_TOKEN.keys())
def test_tied_maxima_take_the_first(params, companions, compiled):
    torch.manual_seed(0)
    num_rows = 64  # many draws of the noise: one tied token other than the first would show
    batch = [params] * num_rows + companions
    tokens = Sampler(compiled=compiled)(tied_logits(len(batch)), batch, [None] * len(batch))
    assert tokens[:num_rows] == [TIED[0]] * num_rows
