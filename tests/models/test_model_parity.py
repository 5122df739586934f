"""Our Qwen3 against transformers' Qwen3ForCausalLM on the same random checkpoint (fp32, CPU)."""

import pytest
import torch
from transformers import Qwen3ForCausalLM

from nvllm import LLM, SamplingParams
from nvllm.scheduler.sequence import Sequence

PROMPTS = [
    [9707, 11, 1879, 0],  # 4 tokens
    list(range(1000, 1023)),  # 23 tokens: spans several blocks of 4
    [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198],
]


@pytest.fixture(scope="module")
def hf_model(tiny_checkpoint):
    return Qwen3ForCausalLM.from_pretrained(str(tiny_checkpoint), dtype=torch.float32).eval()


def checkpoint_engine(checkpoint, **overrides) -> LLM:
    """The engine on the checkpoint HF loads: eager fp32, blocks of 4 so prompts span several; one decode
    step per round, so that a test can read each step's logits."""
    settings = dict(
        enforce_eager=True,
        num_decode_steps=1,
        kvcache_block_size=4,
        num_kvcache_blocks=256,
        max_num_batched_tokens=64,
        max_model_len=64,
    )
    return LLM(str(checkpoint), **{**settings, **overrides})


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    with checkpoint_engine(tiny_checkpoint) as engine:
        yield engine


def hf_logits(hf_model, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([token_ids])).logits[0]


def engine_step_logits(llm, forced_tokens: dict[int, int]) -> tuple[list[Sequence], torch.Tensor]:
    """One scheduled step: its logits (one row per sampled sequence), then the forced tokens appended."""
    batch = llm.scheduler.schedule()
    runner = llm.model_runner
    (inputs,) = llm.inputs.build(batch)
    logits = runner.forward(inputs)
    sampled = batch.sampled_seqs
    llm.scheduler.launched(batch)
    llm.scheduler.postprocess(batch, [[forced_tokens[s.seq_id]] for s in sampled])
    for seq in sampled:  # where the next decode step reads each sequence's newest token
        runner.token_table[seq.token_row] = forced_tokens[seq.seq_id]
    return sampled, logits[: len(sampled)]


def test_prefill_and_decode_logits_match_transformers(llm, hf_model):
    continuations = {}
    seqs = [llm.add_request(p, SamplingParams(max_tokens=6, temperature=0)) for p in PROMPTS]
    for seq in seqs:  # the tokens HF would pick greedily: the engine is fed exactly these
        full = hf_model.generate(torch.tensor([seq.token_ids]), max_new_tokens=6, do_sample=False)[0].tolist()
        continuations[seq.seq_id] = full
    step = 0
    while not llm.is_finished():
        forced = {s.seq_id: continuations[s.seq_id][s.host_len] for s in seqs if not s.is_finished}
        sampled, logits = engine_step_logits(llm, forced)
        for seq, row in zip(sampled, logits):
            reference = hf_logits(hf_model, seq.token_ids[:-1])[-1]  # logits that picked the appended token
            torch.testing.assert_close(row, reference, atol=2e-4, rtol=1e-4)
        step += 1
    assert step == 6  # one prefill step (all prompts fit the budget), then 5 decode steps
    for seq in seqs:
        assert seq.token_ids == continuations[seq.seq_id]


def test_chunked_prefill_logits_match_transformers(tiny_checkpoint, hf_model):
    """A 40-token prompt through a 16-token budget: three chunks, the later ones attending to the cache."""
    prompt = list(range(2000, 2040))
    with checkpoint_engine(tiny_checkpoint, num_kvcache_blocks=64, max_num_batched_tokens=16) as engine:
        seq = engine.add_request(prompt, SamplingParams(max_tokens=1, temperature=0))
        num_steps, logits = 0, None
        while not engine.is_finished():
            _, step_logits = engine_step_logits(engine, {seq.seq_id: 0})
            logits = step_logits if len(step_logits) else logits
            num_steps += 1
    assert num_steps == 3
    torch.testing.assert_close(logits[0], hf_logits(hf_model, prompt)[-1], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("num_decode_steps", [1, 5])
def test_greedy_generation_equals_transformers_generate(tiny_checkpoint, hf_model, num_decode_steps):
    """Rounds of 5 decode steps feed each step's tokens to the next on the device; 16 tokens end mid-round."""
    prompts = PROMPTS + [[42] * 9, list(range(30000, 30050, 3))]
    with checkpoint_engine(tiny_checkpoint, num_decode_steps=num_decode_steps) as llm:
        outputs = llm.generate(
            prompts, SamplingParams(max_tokens=16, temperature=0, ignore_eos=True), use_tqdm=False
        )
        for prompt, output in zip(prompts, outputs):
            expected = hf_model.generate(
                torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None
            )[0, len(prompt) :].tolist()
            assert output["token_ids"] == expected
            assert output["text"] == llm.tokenizer.decode(expected, skip_special_tokens=True)
    assert len({tuple(o["token_ids"]) for o in outputs}) == len(prompts)  # the model does depend on its input
