"""Log-probabilities, penalties and min_tokens against transformers' logits on the same checkpoint (fp32,
CPU), through decode rounds of several steps and overlapped rounds (the engine's defaults)."""

import pytest
import torch
from transformers import Qwen3ForCausalLM

from nvllm import LLM, SamplingParams
from nvllm.sampling.logits_processors import Penalties

PROMPTS = [[9707, 11, 1879, 0], list(range(1000, 1013)), [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30]]
MAX_TOKENS = 10


@pytest.fixture(scope="module")
def hf_model(tiny_checkpoint):
    return Qwen3ForCausalLM.from_pretrained(str(tiny_checkpoint), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    settings = dict(kvcache_block_size=4, num_kvcache_blocks=256, max_model_len=64, num_decode_steps=4)
    with LLM(str(tiny_checkpoint), enforce_eager=True, **settings) as engine:
        yield engine


@pytest.fixture(scope="module")
def greedy_outputs(llm):
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    return llm.generate(PROMPTS, params, use_tqdm=False)


def hf_next_logits(hf_model, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([token_ids])).logits[0, -1]


def reference_penalties(logits: torch.Tensor, prompt: list[int], output: list[int], params) -> torch.Tensor:
    """vLLM's definitions, token by token."""
    logits = logits.clone()
    for token in set(prompt) | set(output):
        value = logits[token]
        logits[token] = value / params.repetition_penalty if value > 0 else value * params.repetition_penalty
    for token in set(output):
        logits[token] -= params.frequency_penalty * output.count(token) + params.presence_penalty
    return logits


def reference_greedy(hf_model, prompt: list[int], params: SamplingParams, banned=()) -> list[int]:
    """Greedy decoding on transformers' logits with the penalties applied and `banned` tokens suppressed
    while the output is shorter than `min_tokens`."""
    output = []
    while len(output) < params.max_tokens:
        logits = reference_penalties(hf_next_logits(hf_model, prompt + output), prompt, output, params)
        if len(output) < params.min_tokens:
            logits[list(banned)] = float("-inf")
        output.append(int(logits.argmax()))
        if output[-1] in (params.stop_token_ids or []) and len(output) > params.min_tokens:
            break
    return output


def test_logprobs_equal_log_softmax_of_transformers_logits(llm, hf_model):
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=3, ignore_eos=True)
    for prompt, out in zip(PROMPTS, llm.generate(PROMPTS, params, use_tqdm=False)):
        completion = out.outputs[0]
        assert len(completion.logprobs) == len(completion.token_ids) == MAX_TOKENS
        for step, (token, logprobs) in enumerate(zip(completion.token_ids, completion.logprobs)):
            reference = hf_next_logits(hf_model, prompt + completion.token_ids[:step]).log_softmax(-1)
            top = reference.topk(3).indices.tolist()
            assert token == top[0]  # greedy: the sampled token is the most likely one
            assert set(logprobs) == set(top)
            for token_id, logprob in logprobs.items():
                assert logprob == pytest.approx(float(reference[token_id]), abs=2e-4)


def test_sampled_token_has_its_logprob_beside_the_top_k(llm, hf_model):
    params = SamplingParams(temperature=1.5, seed=3, max_tokens=MAX_TOKENS, logprobs=1, ignore_eos=True)
    (out,) = llm.generate(PROMPTS[:1], params, use_tqdm=False)
    completion = out.outputs[0]
    assert any(len(entry) == 2 for entry in completion.logprobs)  # a token outside the top 1 was sampled
    for step, (token, logprobs) in enumerate(zip(completion.token_ids, completion.logprobs)):
        reference = hf_next_logits(hf_model, PROMPTS[0] + completion.token_ids[:step]).log_softmax(-1)
        assert int(reference.argmax()) in logprobs and token in logprobs
        assert logprobs[token] == pytest.approx(float(reference[token]), abs=2e-4)


@pytest.mark.parametrize(
    "penalties",
    [
        # the random model rarely repeats a token: penalties below 0 (and 1) pull seen tokens up, so that
        # they change the output
        dict(repetition_penalty=0.4),
        dict(presence_penalty=-2.0),
        dict(repetition_penalty=0.5, presence_penalty=1.0, frequency_penalty=-2.0),
    ],
)
def test_penalties_equal_a_hand_written_reference(llm, hf_model, greedy_outputs, penalties):
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, **penalties)
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    assert [o["token_ids"] for o in outputs] != [o["token_ids"] for o in greedy_outputs]  # they bite
    for prompt, out in zip(PROMPTS, outputs):
        assert out["token_ids"] == reference_greedy(hf_model, prompt, params)


def test_min_tokens_suppresses_stop_tokens_until_then(llm, hf_model, greedy_outputs):
    base = greedy_outputs[0]["token_ids"]
    position = next(i for i in range(2, len(base)) if base[i] not in base[:i])
    stop_token = base[position]  # greedy would stop there
    params = SamplingParams(
        temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, stop_token_ids=[stop_token], min_tokens=6
    )
    (out,) = llm.generate(PROMPTS[:1], params, use_tqdm=False)
    expected = reference_greedy(hf_model, PROMPTS[0], params, banned=[stop_token])
    assert out["token_ids"] == expected and stop_token not in expected[:6]
    stopped = out.outputs[0].finish_reason == "stop"
    assert stopped == (expected[-1] == stop_token and len(expected) < MAX_TOKENS)
    without_min = llm.generate(
        PROMPTS[:1], SamplingParams(**{**vars_of(params), "min_tokens": 0}), use_tqdm=False
    )[0]
    assert without_min["token_ids"] == base[: position + 1]
    assert without_min.outputs[0].stop_reason == stop_token


def vars_of(params: SamplingParams) -> dict:
    fields = ("temperature", "max_tokens", "ignore_eos", "stop_token_ids", "min_tokens")
    return {name: getattr(params, name) for name in fields}


def test_penalties_kernel_against_reference_over_steps():
    """The device history (`Penalties.update`) across steps of a round, rows sitting steps out included."""
    torch.manual_seed(0)
    vocab, prompts = 50, [[1, 2, 3], [4, 4, 5]]
    outputs: list[list[int]] = [[7], []]
    params = [
        SamplingParams(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.2),
        SamplingParams(repetition_penalty=0.8, frequency_penalty=-0.3),
    ]
    seen = torch.zeros(2, vocab, dtype=torch.bool)
    counts = torch.zeros(2, vocab)
    for row in range(2):
        seen[row, prompts[row] + outputs[row]] = True
        for token in outputs[row]:
            counts[row, token] += 1
    penalties = Penalties(
        rows=torch.tensor([0, 1]),
        seen=seen,
        counts=counts,
        presence=torch.tensor([p.presence_penalty for p in params]),
        frequency=torch.tensor([p.frequency_penalty for p in params]),
        repetition=torch.tensor([p.repetition_penalty for p in params]),
    )
    num_steps = torch.tensor([3, 1])  # the second row sits out steps 1 and 2
    for step in range(3):
        logits = torch.randn(2, vocab)
        processed = logits.clone()
        penalties.apply(processed)
        for row in range(2):
            expected = reference_penalties(logits[row], prompts[row], outputs[row], params[row])
            torch.testing.assert_close(processed[row], expected)
        tokens = torch.randint(0, vocab, (2,))
        penalties.update(tokens, step < num_steps)
        for row in range(2):
            if step < num_steps[row]:
                outputs[row].append(int(tokens[row]))
