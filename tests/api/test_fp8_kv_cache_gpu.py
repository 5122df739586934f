"""`kv_cache_dtype="fp8"` on the GPU: the compiled engine inside its CUDA graphs (fused store, Triton decode,
flash-attn over dequantized blocks for prefills over cached prefixes) against the eager torch backend on
the same fp8 cache, and twice the blocks of a bf16 cache in the same memory."""

import statistics

import pytest
import torch

from nvllm import LLM, SamplingParams
from tests.helpers.checkpoints import write_checkpoint

pytestmark = pytest.mark.gpu

SHARED = list(range(1000, 1600))  # a prefix of 600 tokens that several prompts share (cascade, prefix hits)
PROMPTS = [list(range(100 + i, 100 + i + n)) for i, n in enumerate([5, 37, 128, 300, 700, 1])] + [
    SHARED + [7 + i] * (i + 1) for i in range(4)
]
GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True, logprobs=5)
SETTINGS = dict(kv_cache_dtype="fp8", max_num_seqs=64, max_model_len=2048)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("qwen3-0.6b"), "qwen3-0.6b", seed=0)


def assert_same_greedy_paths(reference, other) -> None:
    """The two engines read the same fp8 cache and differ by bf16 kernels' rounding only: they part, if at
    all, at near-ties, and their log-probabilities of the shared tokens agree closely."""
    for expected, actual in zip(reference, other, strict=True):
        expected, actual = expected.outputs[0], actual.outputs[0]
        pairs = list(zip(expected.token_ids, actual.token_ids, strict=True))
        shared = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
        gaps = [
            abs(expected.logprobs[i][t] - actual.logprobs[i][t])
            for i, t in enumerate(actual.token_ids[:shared])
        ]
        assert not gaps or statistics.fmean(gaps) < 0.1, gaps
        if shared < len(pairs):
            at_parting = expected.logprobs[shared]
            theirs = actual.token_ids[shared]
            assert theirs in at_parting and at_parting[expected.token_ids[shared]] - at_parting[theirs] < 0.5


@pytest.mark.parametrize("cascade", ["auto", "on"])
def test_fp8_cache_inside_cuda_graphs_matches_the_eager_torch_backend(checkpoint, cascade):
    """`on`: the shared prompts' decode steps by cascade attention, whose prefix pass reads the fp8 blocks
    through a scratch copy numbered by the round's plan."""
    with LLM(str(checkpoint), gpu_memory_utilization=0.4, attention__cascade=cascade, **SETTINGS) as llm:
        assert llm.model_runner.graph_runner is not None  # decode steps replay CUDA graphs
        assert llm.model_runner.model.model.layers[0].self_attn.attn.k_cache.dtype == torch.float8_e4m3fn
        compiled = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
        with_prefix_hits = llm.generate(PROMPTS, GREEDY, use_tqdm=False)  # prefills over cached fp8 blocks
    settings = dict(attention_backend="torch", enforce_eager=True, gpu_memory_utilization=0.3)
    with LLM(str(checkpoint), **settings, **SETTINGS) as reference_llm:
        reference = reference_llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert_same_greedy_paths(reference, compiled)
    assert_same_greedy_paths(reference, with_prefix_hits)


def test_fp8_cache_holds_about_twice_the_blocks_of_a_bf16_cache(checkpoint):
    blocks = {}
    for cache_dtype in ("auto", "fp8"):
        settings = dict(enforce_eager=True, max_model_len=2048, gpu_memory_utilization=0.2)
        with LLM(str(checkpoint), kv_cache_dtype=cache_dtype, **settings) as llm:
            blocks[cache_dtype] = llm.model_runner.num_blocks
    # the same budget less the activations' peak, which the dequantized scratch blocks raise a little
    assert 1.9 * blocks["auto"] <= blocks["fp8"] <= 2 * blocks["auto"] + 1, blocks
