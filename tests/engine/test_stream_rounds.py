"""A stream gets each token one model step after it is sampled, not a decode round's worth at once (a token
whose text is held back, half a character, waits for the text); generate keeps its rounds."""

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, recorded_steps, tiny_llm

PROMPTS = [random_prompt(5, seed=710), random_prompt(7, seed=711)]
PARAMS = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
NUM_DECODE_STEPS = 16


def test_a_stream_gets_its_deltas_one_token_at_a_time_and_generate_keeps_its_rounds():
    with tiny_llm(num_decode_steps=NUM_DECODE_STEPS) as llm:
        expected = llm.generate(PROMPTS, PARAMS, use_tqdm=False)
        streamed = {index: [] for index in range(len(PROMPTS))}
        with recorded_steps(llm) as stream_steps:
            for index, delta in llm.stream(PROMPTS, PARAMS):
                held_back = "\ufffd" in delta.text  # a token of half a character waited for the next
                assert len(delta.token_ids) == 1 or held_back
                streamed[index] += delta.token_ids
        assert [streamed[i] for i in range(len(PROMPTS))] == [out.outputs[0].token_ids for out in expected]
        assert all(max(step.num_new_tokens) == 1 for step in stream_steps if not step.is_prefill)
        with recorded_steps(llm) as steps:
            assert llm.generate(PROMPTS, PARAMS, use_tqdm=False) == expected
        decode_rounds = [step.num_new_tokens for step in steps if not step.is_prefill]
        assert decode_rounds[0] == [PARAMS.max_tokens - 1] * len(PROMPTS)  # the prefill samples the first


def test_prompts_arriving_one_after_another_leave_a_decode_step_between_prefills():
    """Streams in rounds of one step, a new prompt arriving before every step: each prefill step is followed
    by a decode step of the sequences already decoding, so their tokens keep coming; every request still
    gets its `generate` tokens."""
    prompts = [random_prompt(9 + i, seed=720 + i) for i in range(6)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    with tiny_llm(num_decode_steps=NUM_DECODE_STEPS) as llm:
        expected = [out.outputs[0].token_ids for out in llm.generate(prompts, params, use_tqdm=False)]
        llm.set_streaming(True)
        try:
            with recorded_steps(llm) as steps:
                seqs = []
                for prompt in prompts:
                    seqs.append(llm.add_request(prompt, params))
                    llm.step()
                while not llm.is_finished():
                    llm.step()
        finally:
            llm.set_streaming(False)
    assert [seq.completion_token_ids for seq in seqs] == expected
    kinds = ["prefill" if step.is_prefill else "decode" for step in steps]
    assert kinds[:4] == ["prefill", "decode", "prefill", "decode"], kinds
    assert all(kinds[i + 1] == "decode" for i, kind in enumerate(kinds[:-1]) if kind == "prefill"), kinds


def test_full_rounds_handed_out_step_by_step_give_generates_samples_and_logprobs():
    """Full rounds handed out one step at a time (`one_step_rounds_max_seqs=0`), with forks (`n=2`),
    seeded sampling and log-probabilities: each sample's deltas add up to its `generate` output, tokens
    and log-probabilities alike, one token a step."""
    prompts = [random_prompt(6 + i, seed=730 + i) for i in range(3)]
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=20, n=2, logprobs=2, ignore_eos=True)
    with tiny_llm(num_decode_steps=4, scheduler__one_step_rounds_max_seqs=0) as llm:
        expected = llm.generate(prompts, params, use_tqdm=False)
        streamed = {}
        with recorded_steps(llm) as steps:
            for index, delta in llm.stream(prompts, params):
                tokens, logprobs = streamed.get((index, delta.index), ([], []))
                streamed[(index, delta.index)] = (tokens + delta.token_ids, logprobs + delta.logprobs)
    assert max(max(step.num_new_tokens) for step in steps if not step.is_prefill) == 4  # full rounds
    for index, output in enumerate(expected):
        for sample in output.outputs:
            assert streamed[(index, sample.index)] == (sample.token_ids, sample.logprobs)
