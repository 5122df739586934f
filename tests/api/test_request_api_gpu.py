"""The request API on the CUDA path (flash-attn, compiled model and sampler, CUDA graphs of decode and of
prefill): forks' block copies on the GPU, log-probabilities and penalties through pinned copies, streaming."""

import pytest
import torch

from nvllm import LLM, SamplingParams
from tests.helpers.checkpoints import write_checkpoint

pytestmark = pytest.mark.gpu

PROMPTS = [list(range(100 + i, 100 + i + n)) for i, n in enumerate([5, 300, 37])]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    checkpoint = write_checkpoint(tmp_path_factory.mktemp("qwen3-0.6b"), "qwen3-0.6b", seed=0)
    with LLM(str(checkpoint), max_num_seqs=64, max_model_len=2048, gpu_memory_utilization=0.5) as llm:
        yield llm


def test_greedy_samples_share_the_prompt_and_equal_one_request(engine):
    greedy = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    single = engine.generate(PROMPTS, greedy, use_tqdm=False)
    before = engine.stats()["prefill_tokens"]
    shared = engine.generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=48, ignore_eos=True, n=3), use_tqdm=False
    )
    assert engine.stats()["prefill_tokens"] - before <= sum(map(len, PROMPTS))  # once (less: cache hits)
    for alone, out in zip(single, shared):
        # the forks read copies of the parent's last block: a wrong copy would part them from the parent
        assert all(c.token_ids == out.outputs[0].token_ids for c in out.outputs)
        # the same prefill step (batch sizes differ after it, and bf16 greedy paths part at near ties)
        assert out["token_ids"][0] == alone["token_ids"][0]


def test_logprobs_and_penalties_on_the_gpu(engine):
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, logprobs=5)
    for out in engine.generate(PROMPTS, params, use_tqdm=False):
        completion = out.outputs[0]
        for token, entry in zip(completion.token_ids, completion.logprobs):
            # greedy takes a most likely token: bf16 logits tie often, so compare values, not keys
            assert len(entry) == 5 and entry[token] == max(entry.values())
            assert all(value <= 0 for value in entry.values())
            assert torch.tensor(list(entry.values())).exp().sum() <= 1 + 1e-3
    plain = engine.generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), use_tqdm=False
    )
    penalised = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, presence_penalty=-2.0)
    outputs = engine.generate(PROMPTS, penalised, use_tqdm=False)
    assert [o["token_ids"] for o in outputs] != [o["token_ids"] for o in plain]
    repeated = [len(o["token_ids"]) - len(set(o["token_ids"])) for o in outputs]
    assert sum(repeated) > sum(len(o["token_ids"]) - len(set(o["token_ids"])) for o in plain)


def test_stream_adds_up_to_generate_on_the_gpu(engine):
    params = SamplingParams(temperature=0.8, seed=7, max_tokens=64, n=2, stop=["\n\n"])
    outputs = engine.generate(PROMPTS, params, use_tqdm=False)
    streamed = {}
    for index, delta in engine.stream(PROMPTS, params):
        tokens, text = streamed.get((index, delta.index), ([], ""))
        streamed[(index, delta.index)] = (tokens + delta.token_ids, text + delta.text)
    for index, out in enumerate(outputs):
        for completion in out.outputs:
            assert streamed[(index, completion.index)] == (completion.token_ids, completion.text)
