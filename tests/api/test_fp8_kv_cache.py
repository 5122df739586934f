"""`kv_cache_dtype="fp8"` through the engine on the CPU, against the same engine with a float cache: the
same random tiny model and prompts, read back through chunked prefill (earlier chunks from the cache) and
decode. The tiny model puts many tokens at near-ties, so e4m3's rounding flips some greedy choices; where one
flips, the float engine had the two tokens close."""

import statistics

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

SETTINGS = dict(kvcache_block_size=16, max_num_batched_tokens=64)  # prompts span blocks and chunks


def top_token(logprobs: dict[int, float]) -> int:
    return max(logprobs, key=logprobs.__getitem__)


@pytest.fixture(scope="module")
def outputs():
    prompts = [random_prompt(150 + 17 * i, seed=i) for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=5, prompt_logprobs=1)
    results = {}
    for cache_dtype in ("auto", "fp8"):
        with tiny_llm(kv_cache_dtype=cache_dtype, **SETTINGS) as llm:
            results[cache_dtype] = llm.generate(prompts, params, use_tqdm=False)
    return results["auto"], results["fp8"]


def test_fp8_cache_keeps_most_next_token_choices_and_logprobs_close(outputs):
    for exact, fp8 in zip(*outputs, strict=True):
        positions = list(zip(exact.prompt_logprobs[1:], fp8.prompt_logprobs[1:], exact.prompt_token_ids[1:]))
        same_top = statistics.fmean(top_token(a) == top_token(b) for a, b, _ in positions)
        gaps = [abs(a[token] - b[token]) for a, b, token in positions]
        assert same_top >= 0.75, same_top  # the flips are near-ties of the random model
        assert statistics.fmean(gaps) < 0.2 and max(gaps) < 1.0, (statistics.fmean(gaps), max(gaps))


def test_greedy_generations_part_only_where_the_float_engine_had_a_near_tie(outputs):
    for exact, fp8 in zip(*outputs, strict=True):
        reference, other = exact.outputs[0], fp8.outputs[0]
        pairs = list(zip(reference.token_ids, other.token_ids, strict=True))
        shared = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
        assert shared >= 1
        if shared < len(pairs):
            at_parting = reference.logprobs[shared]
            assert other.token_ids[shared] in at_parting  # the fp8 engine's choice was a close second
            assert at_parting[reference.token_ids[shared]] - at_parting[other.token_ids[shared]] < 0.5


def test_fp8_cache_holds_twice_the_blocks_of_a_bf16_cache_in_the_same_memory():
    blocks = {}
    for cache_dtype in ("auto", "fp8"):
        with tiny_llm(dtype="bfloat16", kv_cache_dtype=cache_dtype, cache__cpu_memory_gib=2**-8) as llm:
            blocks[cache_dtype] = llm.model_runner.num_blocks
            assert str(llm.model_runner.model.model.layers[0].self_attn.attn.k_cache.dtype).endswith(
                "float8_e4m3fn" if cache_dtype == "fp8" else "bfloat16"
            )
    # 4 MiB; K and V of the tiny model's 4 layers, 4 KV heads of 32, blocks of 256: 2**18 elements a block
    assert blocks == {"auto": 2**22 // (2 * 2**18), "fp8": 2**22 // 2**18} == {"auto": 8, "fp8": 16}


def test_unknown_kv_cache_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="cache.dtype='int8' must be auto or fp8"):
        tiny_llm(kv_cache_dtype="int8")


def test_forked_samples_copy_their_fp8_blocks_and_preempted_ones_recompute_them():
    prompt = random_prompt(40, seed=9)  # ends inside a block: each sample gets a copy of it
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    with tiny_llm(kv_cache_dtype="fp8", **SETTINGS) as llm:
        alone = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0].token_ids
        forked = llm.generate([prompt], SamplingParams(n=3, temperature=0, max_tokens=20, ignore_eos=True))[0]
    assert [sample.token_ids for sample in forked.outputs] == [alone] * 3
    # 4 blocks of 16 tokens hold one of the three sequences at a time: the others are preempted
    with tiny_llm(kv_cache_dtype="fp8", num_kvcache_blocks=4, **SETTINGS) as llm:
        squeezed = llm.generate([prompt] * 3, params, use_tqdm=False)
        assert llm.scheduler.num_preemptions > 0
    assert [request.outputs[0].token_ids for request in squeezed] == [alone] * 3
