"""The grammar masks on CUDA consume a step's tokens only at the next step's sampling (after that step's
forward is launched), from a pinned copy: the tokens they read must be the ones sampled. Oracles: the same
steps sampled on the CPU (where the matchers consume at once) from the same logits, with the device held
back before every step so that a read which does not wait for its copy sees stale tokens; and the engine
on CUDA with the matchers consuming at once (the synchronous path), token for token."""

import json

import jsonschema
import pytest
import torch

from nvllm import LLM, SamplingParams
from nvllm.config import ModelConfig
from nvllm.sampling.grammar_compiler import GrammarCompiler
from nvllm.sampling.grammar_masks import GrammarMasks, grammar_masks
from nvllm.sampling.sampler import Sampler
from nvllm.sampling.structured_params import StructuredOutputsParams
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.tokenizer import load_tokenizer
from tests.helpers.engine_utils import random_prompt

pytestmark = pytest.mark.gpu

MODEL = ModelConfig()
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "word": {"type": "string", "maxLength": 8},
    },
    "required": ["id", "word"],
    "additionalProperties": False,
}
NUM_STEPS = 24
DEVICE_DELAY_CYCLES = 20_000_000  # ~10 ms of a GPU's clock: the host reaches its read long before the copy


def sampled_round(device: str, compiler: GrammarCompiler) -> tuple[list[list[int]], list[int]]:
    """A decode round of NUM_STEPS steps over the same logits, driven as the model runner drives one: the
    step's logits (behind a device held back), its sampling, the next step's..., the matchers settled at
    the end; nothing else waits for the device. Greedy rows (the device's random numbers differ from the
    CPU's): three under the schema, one of them sitting out the last steps, and a free one."""
    constraint = StructuredOutputsParams(json=SCHEMA)
    params = [SamplingParams(temperature=0, structured_outputs=constraint)] * 3 + [
        SamplingParams(temperature=0)
    ]
    seqs = [Sequence([1, 2, 3], p) for p in params]
    for seq in seqs[:3]:
        seq.grammar = compiler.new_state(constraint)
    num_steps = [NUM_STEPS, NUM_STEPS, NUM_STEPS - 5, NUM_STEPS]
    batch = Sampler.prepare(params, [None] * len(params), device, num_steps=num_steps)
    batch.grammar_masks = grammar_masks(seqs, num_steps, device)
    noise = torch.Generator().manual_seed(0)
    all_logits = torch.randn(NUM_STEPS, len(params), MODEL.vocab_size, generator=noise).to(device)
    sampler, tokens = Sampler(), []
    for step in range(NUM_STEPS):
        if device == "cuda":
            torch.cuda._sleep(DEVICE_DELAY_CYCLES)
        tokens.append(sampler.sample(all_logits[step], batch, step))
    batch.grammar_masks.settle()
    rows = torch.stack(tokens, dim=1).tolist()
    return [row[:steps] for row, steps in zip(rows, num_steps)], [
        seq.grammar.num_consumed for seq in seqs[:3]
    ]


def test_a_round_on_cuda_samples_what_the_synchronous_cpu_round_samples():
    compiler = GrammarCompiler(load_tokenizer(None), MODEL.vocab_size, MODEL.eos_token_ids)
    tokens, num_consumed = sampled_round("cpu", compiler)
    assert sampled_round("cuda", compiler) == (tokens, num_consumed)
    assert (
        min(num_consumed) > 2
    )  # the matchers went on consuming (a grammar that ends at once checks nothing)


@pytest.fixture(scope="module")
def llm():
    # Qwen3-0.6B's shape (random weights): its head_dim of 128 is what every flash-attn build takes
    settings = dict(max_num_seqs=16, max_model_len=2048, gpu_memory_utilization=0.3, num_decode_steps=8)
    with LLM("qwen3-0.6b", **settings) as engine:
        yield engine


def test_constrained_outputs_equal_the_synchronous_paths(llm, monkeypatch):
    prompts = [random_prompt(12, seed) for seed in range(6)]
    params = [
        SamplingParams(temperature=1.0, seed=seed, max_tokens=64, structured_outputs={"json": SCHEMA})
        if seed % 3
        else SamplingParams(temperature=1.0, seed=seed, max_tokens=64)  # a free row in the batch
        for seed in range(6)
    ]
    overlapped = [out.outputs[0] for out in llm.generate(prompts, params, use_tqdm=False)]
    accept = GrammarMasks.accept

    def accept_at_once(self: GrammarMasks, tokens: torch.Tensor, step: int) -> None:
        accept(self, tokens, step)
        self.settle()

    monkeypatch.setattr(GrammarMasks, "accept", accept_at_once)
    synchronous = [out.outputs[0] for out in llm.generate(prompts, params, use_tqdm=False)]
    assert [o.token_ids for o in overlapped] == [o.token_ids for o in synchronous]
    for seed, output in enumerate(overlapped):
        if seed % 3:
            jsonschema.validate(json.loads(output.text), SCHEMA)
