"""The race kernels (`nvllm.ops.race_triton`) in Triton's interpreter: greedy rows against torch's argmax
(the first largest logit, across chunks and tiles), sampled rows' token frequencies against
softmax(logits / T), Philox's seeds, and the sampler's dispatch to them (`compile.race_kernel`). The GPU runs
the same kernels in `tests/ops/test_race_triton_gpu.py`."""

from tests.helpers.triton_interpreter import run_in_interpreter

# Token frequencies of many independent rows against softmax(logits / T), each within 4.5 standard errors
FREQUENCIES_CHECK = """
import torch
import nvllm.ops.race_triton as race_triton
from nvllm.ops.race_triton import race_in_kernels
from tests.helpers.sampled_frequencies import assert_follows

# small tiles: the interpreter's time goes by programs, so that each row's tiles are few
race_triton.BLOCK, race_triton.TILE = 64, 256

def check_frequencies(tokens, rows, logits, inv_temperature):
    assert_follows(tokens[rows], torch.softmax(logits.double() * inv_temperature, -1).tolist(), 4.5)
"""


def test_greedy_rows_take_the_first_largest_logit():
    run_in_interpreter(
        """
import torch
import nvllm.ops.race_triton as race_triton
from nvllm.ops.race_triton import race_in_kernels

vocab, num_rows = 10_000, 6  # three tiles, the last one partly past the vocabulary
generator = torch.Generator().manual_seed(0)
for target_programs, expected_chunks in ((18, 3), (6, 1)):  # a row in three chunks; a row in one
    race_triton.TARGET_PROGRAMS = target_programs
    assert race_triton.race_chunks(num_rows, vocab)[1] == expected_chunks
    logits = torch.randn(num_rows, vocab, generator=generator).to(torch.bfloat16)
    logits[0, [5000, 9000]] = 8.0  # a tie across chunks
    logits[1, [10, 10 + race_triton.BLOCK]] = 8.0  # a tie in one tile: a lane's two quarters
    logits[2, [20, 21]] = 8.0  # a tie between lanes
    logits[3, :] = float("-inf")
    logits[3, [9999, 4096, 7000]] = torch.tensor([1.0, 3.0, 3.0], dtype=torch.bfloat16)  # the rest filtered
    logits[4, :] = float("-inf")  # every token filtered: token 0, as torch's argmax
    ones = torch.ones(num_rows)
    tokens = race_in_kernels(logits, ones, torch.zeros(num_rows), seed=7)
    assert tokens.dtype == torch.int64
    assert tokens[:5].tolist() == [5000, 10, 20, 4096, 0], tokens[:5]
    assert torch.equal(tokens, logits.float().argmax(-1))
"""
    )


def test_sampled_rows_draw_softmax_of_their_temperature():
    """Two temperatures in one batch, 500 draws each: a temperature ignored or taken from another row moves a
    count by over 4.5 standard deviations."""
    run_in_interpreter(
        FREQUENCIES_CHECK
        + """
vocab, num_rows = 250, 1_000  # a tile a row, its last lanes past the vocabulary
row_logits = torch.full((vocab,), float("-inf"))
row_logits[[3, 70, 150, 200, 249]] = torch.tensor([0.0, 0.7, -0.4, -1.5, 1.2])
logits = row_logits.repeat(num_rows, 1)
hot, cold = torch.arange(0, num_rows, 2), torch.arange(1, num_rows, 2)
inv_temperatures = torch.empty(num_rows)
inv_temperatures[hot], inv_temperatures[cold] = 1 / 2.0, 1 / 0.5
tokens = race_in_kernels(logits, inv_temperatures, torch.ones(num_rows), seed=1234)
check_frequencies(tokens, hot, row_logits, 1 / 2.0)
check_frequencies(tokens, cold, row_logits, 1 / 0.5)
"""
    )


def test_seeds_repeat_and_rows_draw_apart():
    run_in_interpreter(
        """
import torch
import nvllm.ops.race_triton as race_triton
from nvllm.ops.race_triton import race_in_kernels

race_triton.BLOCK, race_triton.TILE = 64, 256
num_rows, vocab = 16, 2_000  # 8 tiles, a chunk each
assert race_triton.race_chunks(num_rows, vocab)[1] == 8
logits = torch.zeros(num_rows, vocab)  # uniform: every token as likely
ones = torch.ones(num_rows)
first = race_in_kernels(logits, ones, ones, seed=11)
assert torch.equal(first, race_in_kernels(logits, ones, ones, seed=11))
other = race_in_kernels(logits, ones, ones, seed=12)
assert (first != other).sum() > num_rows - 3  # two draws from 2,000 tokens rarely meet
assert len(set(first.tolist())) > num_rows - 3  # the rows' counters differ: their draws do too
assert (first >= vocab // 2).sum() >= 3  # the tiles' too: the noise repeated, the first tile would win ties
"""
    )


def test_sampler_races_in_kernels_unless_a_row_filters_or_has_its_own_seed():
    """`Sampler(race_kernel=True)`: a batch of plain rows takes the kernels' tokens under the seed torch's
    generator gives; a seeded row, or a batch with top-k, races in torch (the seeded row's token the same as
    without the kernels)."""
    run_in_interpreter(
        """
import torch
import nvllm.sampling.sampler as sampler_module
from nvllm import SamplingParams
from nvllm.ops.race_triton import race_in_kernels
from nvllm.sampling.sampler import Sampler

generator = torch.Generator().manual_seed(3)
logits = torch.randn(6, 3_000, generator=generator)
params = [SamplingParams(temperature=0.8)] * 5 + [SamplingParams(temperature=0)]
kernel_sampler = Sampler(race_kernel=True)
batch = Sampler.prepare(params, [None] * 6, "cpu")
torch.manual_seed(5)
tokens = kernel_sampler.sample(logits, batch)
torch.manual_seed(5)
seed = int(torch.randint(sampler_module.RACE_SEEDS, ()))
assert torch.equal(tokens, race_in_kernels(logits, batch.inv_temperatures, batch.noise_scales, seed))
assert tokens[5] == logits[5].argmax()

def seeded_token(sampler):
    seeded = [*params[:5], SamplingParams(temperature=0.8, seed=99)]
    generators = [None] * 5 + [torch.Generator().manual_seed(99)]
    return sampler.sample(logits, Sampler.prepare(seeded, generators, "cpu"))[5]

assert seeded_token(kernel_sampler) == seeded_token(Sampler())
calls = []
import nvllm.ops.race_triton as race_triton
race_triton.race_in_kernels = lambda *args: calls.append(args)
top_k = [SamplingParams(temperature=0.8, top_k=5)] * 6
kernel_sampler.sample(logits, Sampler.prepare(top_k, [None] * 6, "cpu"))
seeded_token(kernel_sampler)
assert not calls  # neither batch reached the kernels
kernel_sampler.sample(logits, batch)
assert len(calls) == 1  # the stand-in sees the plain batch: the check above is not vacuous
"""
    )
