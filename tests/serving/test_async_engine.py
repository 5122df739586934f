"""The async engine: requests from several asyncio tasks at once each get their own tokens, those of
`generate`; an abort frees the request's KV blocks by the time it returns and ends its stream."""

import asyncio

import pytest

from nvllm.outputs import CompletionOutput
from nvllm.sampling_params import SamplingParams
from nvllm.serving.async_engine import AsyncEngine, merged_deltas
from nvllm.serving.served_engine import ABORTED
from tests.helpers.engine_utils import random_prompt, tiny_llm

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def engine():
    llm = tiny_llm(max_num_seqs=8, num_decode_steps=4)
    served = AsyncEngine(llm)
    yield served
    served.shutdown()


async def tokens_of(engine: AsyncEngine, prompt: list[int], streaming: bool) -> list[int]:
    request = await engine.add_request(prompt, GREEDY, streaming=streaming)
    return [token async for delta in request.deltas() for token in delta.token_ids]


def test_concurrent_tasks_get_generate_tokens(engine):
    prompts = [random_prompt(10 + 7 * i, seed=i) for i in range(6)]
    expected = [out.outputs[0].token_ids for out in engine.engine.generate(prompts, GREEDY, use_tqdm=False)]

    async def main():
        return await asyncio.gather(
            *(tokens_of(engine, p, streaming=i % 2 == 0) for i, p in enumerate(prompts))
        )

    assert asyncio.run(main()) == expected


def test_abort_frees_blocks_and_ends_the_stream(engine):
    blocks = engine.engine.block_manager

    async def main():
        request = await engine.add_request(random_prompt(40, seed=9), SamplingParams(max_tokens=10_000))
        deltas = request.deltas()
        first = await deltas.__anext__()
        assert first.token_ids
        assert blocks.num_free_blocks < blocks.num_blocks
        await engine.abort(request.request_id)
        assert blocks.num_free_blocks == blocks.num_blocks
        rest = [delta async for delta in deltas]
        return rest[-1].finish_reason

    assert asyncio.run(main()) == ABORTED
    assert engine.num_active == 0


def test_a_bad_request_raises_and_the_engine_serves_on(engine):
    async def main():
        with pytest.raises(ValueError, match="outside the vocabulary"):
            await engine.add_request([10**6], GREEDY)
        return await tokens_of(engine, random_prompt(8, seed=3), streaming=False)

    expected = engine.engine.generate([random_prompt(8, seed=3)], GREEDY, use_tqdm=False)[0].outputs[0]
    assert asyncio.run(main()) == expected.token_ids


def test_a_reader_behind_gets_each_samples_queued_deltas_as_one():
    """Deltas queued while the reader was busy: joined per sample, up to its finish; other items (the end
    of the stream, an error) keep their place."""
    end = object()
    items = [
        CompletionOutput(0, "a", [1], logprobs=[{1: -0.5}], cumulative_logprob=-0.5),
        CompletionOutput(1, "x", [9], logprobs=[{9: -1.0}], cumulative_logprob=-1.0),
        CompletionOutput(0, "b", [2], "stop", "b", logprobs=[{2: -0.25}], cumulative_logprob=-0.75),
        CompletionOutput(0, "", [], "abort"),  # after a finish: not joined
        CompletionOutput(1, "y", [8], logprobs=[{8: -2.0}], cumulative_logprob=-3.0),
        end,
        CompletionOutput(1, "z", [7], logprobs=[{7: -1.0}], cumulative_logprob=-4.0),
    ]
    assert merged_deltas(items) == [
        CompletionOutput(
            0, "ab", [1, 2], "stop", "b", logprobs=[{1: -0.5}, {2: -0.25}], cumulative_logprob=-0.75
        ),
        CompletionOutput(1, "xy", [9, 8], logprobs=[{9: -1.0}, {8: -2.0}], cumulative_logprob=-3.0),
        CompletionOutput(0, "", [], "abort"),
        end,
        CompletionOutput(1, "z", [7], logprobs=[{7: -1.0}], cumulative_logprob=-4.0),
    ]


def test_a_step_that_raises_fails_its_requests_and_the_engine_serves_on(engine, monkeypatch):
    llm, blocks = engine.engine, engine.engine.block_manager
    prompt = random_prompt(20, seed=11)
    expected = llm.generate([prompt], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    real_launch = llm.launch

    def failing_launch(batch):  # after the step scheduled the request (its blocks taken)
        monkeypatch.setattr(llm, "launch", real_launch)  # only this one step fails
        raise RuntimeError("the device fell over")

    async def main():
        monkeypatch.setattr(llm, "launch", failing_launch)
        request = await engine.add_request(prompt, GREEDY)
        with pytest.raises(RuntimeError, match="the device fell over"):
            [delta async for delta in request.deltas()]
        assert blocks.num_free_blocks == blocks.num_blocks and engine.num_active == 0
        return await tokens_of(engine, prompt, streaming=True)

    assert asyncio.run(main()) == expected
