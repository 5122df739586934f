"""Sampler: greedy, temperature, top-k, top-p against hand-computed distributions; per-request seeds."""

import math

import pytest
import torch

from nvllm import SamplingParams
from nvllm.sampling.sampler import Sampler, chunked_argmax, race, race_in_chunks
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.helpers.sampled_frequencies import assert_follows

NUM_DRAWS = 40_000


def sample(logits: list[float], params: SamplingParams, num_draws: int = NUM_DRAWS) -> torch.Tensor:
    """`num_draws` independent samples from one row of logits (one batch of identical rows)."""
    rows = torch.tensor([logits]).repeat(num_draws, 1)
    return torch.tensor(Sampler()(rows, [params] * num_draws, [None] * num_draws))


def softmax(values: list[float]) -> list[float]:
    exps = [math.exp(v - max(values)) for v in values]
    return [e / sum(exps) for e in exps]


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def test_greedy_is_argmax_also_next_to_sampled_rows():
    logits = torch.randn(6, 1000)
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.0)] * 3
    tokens = Sampler()(logits, params, [None] * 6)
    assert tokens[0::2] == logits[0::2].argmax(-1).tolist()
    assert Sampler()(logits, [SamplingParams(temperature=0)] * 6, [None] * 6) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("width", [151936, 1000, 7])
def test_chunked_argmax_is_argmax_and_takes_the_first_maximum(width):
    scores = torch.randn(5, width)
    scores[1] = 0.0  # all tied: the first
    scores[2, [width // 3, width - 1]] = 100.0  # tied across chunks: the first
    assert chunked_argmax(scores).tolist() == scores.argmax(-1).tolist()
    assert chunked_argmax(scores)[1:3].tolist() == [0, width // 3]


def test_racing_in_chunks_picks_what_racing_whole_rows_picks():
    torch.manual_seed(3)
    logits = torch.randn(6, 4096).to(torch.bfloat16)  # bf16: ties between scores happen
    noise = torch.empty(6, 4096).exponential_()
    inv_temperatures, noise_scales = (
        torch.tensor([1.0, 2.0, 0.5, 1.0, 1.0, 3.0]),
        torch.tensor([1.0] * 5 + [0.0]),
    )
    whole = race(logits, inv_temperatures, noise_scales, noise)
    assert race_in_chunks(logits, inv_temperatures, noise_scales, noise).tolist() == whole.tolist()
    assert whole[5] == logits[5].float().argmax()  # noise scale 0: greedy


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_samples_follow_softmax_of_scaled_logits(temperature):
    logits = [2.0, 1.0, 0.5, 0.0, -1.0]
    draws = sample(logits, SamplingParams(temperature=temperature))
    expected = softmax([v / temperature for v in logits])
    assert_follows(draws, expected)
    if temperature != 1.0:  # the test can tell a temperature from none
        unscaled = softmax(logits)
        assert max(abs(a - b) for a, b in zip(expected, unscaled, strict=True)) > 0.05


def test_top_k_1_is_greedy():
    logits = torch.randn(64, 500)
    tokens = Sampler()(logits, [SamplingParams(temperature=1.5, top_k=1)] * 64, [None] * 64)
    assert tokens == logits.argmax(-1).tolist()


def test_top_k_keeps_the_k_most_likely_in_proportion():
    logits = [0.0, 3.0, -1.0, 2.5, 1.0, 2.0, 0.5]  # top 3: tokens 1, 3, 5
    draws = sample(logits, SamplingParams(temperature=1.0, top_k=3))
    assert set(draws.tolist()) == {1, 3, 5}
    kept = softmax([3.0, 2.5, 2.0])
    assert_follows(draws, [0.0, kept[0], 0.0, kept[1], 0.0, kept[2], 0.0])


@pytest.mark.parametrize(
    "top_p, kept",
    [
        (0.45, [0]),  # 0.5 alone reaches 0.45
        (0.7, [0, 1]),  # 0.5 < 0.7 <= 0.5 + 0.3
        (0.9, [0, 1, 2]),  # 0.8 < 0.9 <= 0.95
        (1.0, [0, 1, 2, 3]),
    ],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    probs = [0.15, 0.5, 0.05, 0.3]  # sorted: token 1 (0.5), 3 (0.3), 0 (0.15), 2 (0.05)
    order = [1, 3, 0, 2]
    kept_tokens = [order[i] for i in kept]
    draws = sample([math.log(p) for p in probs], SamplingParams(temperature=1.0, top_p=top_p))
    mass = sum(probs[t] for t in kept_tokens)
    assert_follows(draws, [probs[t] / mass if t in kept_tokens else 0.0 for t in range(4)])


def test_filters_apply_per_row():
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]])).repeat(3, 1)
    params = [SamplingParams(top_k=1), SamplingParams(top_p=0.7), SamplingParams(top_k=2, top_p=0.45)]
    seen = [set() for _ in params]
    for _ in range(200):
        for row, token in enumerate(Sampler()(logits, params, [None] * 3)):
            seen[row].add(token)
    assert seen == [{1}, {1, 3}, {1}]


def test_seeded_row_draws_the_same_wherever_it_sits():
    logits = torch.randn(4, 1000)
    target = logits[2:3]
    params = SamplingParams(temperature=1.0)

    def draws(batch_logits, row, num_draws=20, seed=1234):
        generator = torch.Generator().manual_seed(seed)
        generators = [generator if i == row else None for i in range(len(batch_logits))]
        sampler, batch_params = Sampler(), [params] * len(batch_logits)
        return [sampler(batch_logits, batch_params, generators)[row] for _ in range(num_draws)]

    alone = draws(target, 0)
    assert draws(logits, 2) == alone  # other rows, drawing from the shared generator, do not matter
    assert draws(torch.cat([logits[:1], target]), 1) == alone
    assert draws(target, 0, seed=4321) != alone
    assert len(set(alone)) > 1  # the draws are random, not a fixed token


# ---- per-request seeds through the engine ----------------------------------------------------------------
@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=16, num_kvcache_blocks=32, max_model_len=64) as engine:
        yield engine


def test_request_seed_reproduces_tokens_in_any_batch(llm):
    prompt, others = random_prompt(10, seed=400), [random_prompt(17, seed=401), random_prompt(4, seed=402)]
    seeded = SamplingParams(temperature=1.0, max_tokens=8, seed=7)
    alone = llm.generate([prompt], seeded, use_tqdm=False)[0]
    batched = llm.generate(
        [others[0], prompt, others[1], prompt],
        [
            SamplingParams(temperature=1.0, max_tokens=8),
            seeded,
            SamplingParams(temperature=0, max_tokens=3),
            SamplingParams(temperature=1.0, max_tokens=8, seed=8),
        ],
        use_tqdm=False,
    )
    assert batched[1] == alone
    assert batched[3]["token_ids"] != alone["token_ids"]  # another seed, another sample
    assert llm.generate([prompt], seeded, use_tqdm=False)[0] == alone  # and again, the same
