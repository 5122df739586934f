"""Scheduler: token/sequence budgets, chunked prefill, preemption and output order, each checked against the
same prompts generated one at a time with room to spare."""

import pytest

from nvllm import SamplingParams
from nvllm.config import SchedulerConfig
from tests.helpers.engine_utils import random_prompt, recorded_steps, tiny_llm

BLOCK_SIZE = 4
# (prompt length, max_tokens): lengths and outputs differ widely, so requests finish out of submission order.
REQUESTS = [(49, 3), (7, 12), (23, 6), (3, 10), (37, 4)]
PROMPTS = [random_prompt(length, seed=100 + i) for i, (length, _) in enumerate(REQUESTS)]
PARAMS = [SamplingParams(temperature=0, max_tokens=max_tokens) for _, max_tokens in REQUESTS]
SMALL_BUDGET, SMALL_MAX_SEQS = 16, 3
NUM_DECODE_STEPS = SchedulerConfig().num_decode_steps


def engine(**overrides):
    return tiny_llm(kvcache_block_size=BLOCK_SIZE, max_model_len=64, **overrides)


@pytest.fixture(scope="module")
def reference():
    with engine(num_kvcache_blocks=256, max_num_batched_tokens=512) as llm:
        yield llm


@pytest.fixture(scope="module")
def expected(reference):
    """Each prompt generated alone, with a budget and a cache that never constrain it."""
    return [
        reference.generate([prompt], params, use_tqdm=False)[0]
        for prompt, params in zip(PROMPTS, PARAMS, strict=True)
    ]


@pytest.fixture(scope="module")
def small_budget():
    with engine(
        num_kvcache_blocks=256, max_num_batched_tokens=SMALL_BUDGET, max_num_seqs=SMALL_MAX_SEQS
    ) as llm:
        yield llm


def assert_engine_idle(llm):
    assert not llm.scheduler.running and not llm.scheduler.waiting
    assert llm.block_manager.num_free_blocks == llm.block_manager.num_blocks


def test_budgets_hold_at_every_step(small_budget, expected):
    with recorded_steps(small_budget) as steps:
        outputs = small_budget.generate(PROMPTS, PARAMS, use_tqdm=False)
    assert outputs == expected
    for step in steps:
        assert len(step.prompts) <= SMALL_MAX_SEQS
        scheduled = list(zip(step.num_new_tokens, step.num_uncomputed_tokens, strict=True))
        if step.is_prefill:
            assert sum(step.num_new_tokens) <= SMALL_BUDGET
            assert all(0 < num_new <= num_left for num_new, num_left in scheduled)
        else:  # each step of a decode round computes one token per sequence
            assert len(step.prompts) <= SMALL_BUDGET
            assert all(
                num_left == 1 and 0 < num_steps <= NUM_DECODE_STEPS for num_steps, num_left in scheduled
            )
    # the limits were reached, so a scheduler that ignored them would have been caught
    assert max(sum(step.num_new_tokens) for step in steps if step.is_prefill) == SMALL_BUDGET
    assert max(len(step.prompts) for step in steps) == SMALL_MAX_SEQS
    assert_engine_idle(small_budget)


def test_long_prompt_is_chunked_and_gives_the_same_tokens(small_budget, reference):
    long_prompt = random_prompt(49, seed=200)  # a prompt no other test sends: no prefix-cache hits
    params = SamplingParams(temperature=0, max_tokens=5)
    with recorded_steps(small_budget) as steps:
        outputs = small_budget.generate([long_prompt], params, use_tqdm=False)
    assert outputs == reference.generate([long_prompt], params, use_tqdm=False)
    chunks = [step.num_new_tokens for step in steps if step.is_prefill]
    # a chunk never leaves one token behind (decode steps take only sampled tokens): 16 + 16 + 15, then 2
    assert chunks == [[SMALL_BUDGET], [SMALL_BUDGET], [SMALL_BUDGET - 1], [2]]
    decodes = [step.num_new_tokens for step in steps if not step.is_prefill]
    assert sum(sum(chunk) for chunk in decodes) == params.max_tokens - 1


# Caches of 4-token blocks that hold the largest request (52 tokens) but not all (about 150 tokens), sized
# so that preemption happens: decode rounds shrink to the free blocks first, which often avoids it.
@pytest.mark.parametrize("num_decode_steps, num_blocks", [(1, 20), (8, 22)])
def test_too_small_kv_cache_preempts_and_gives_the_same_tokens(expected, num_decode_steps, num_blocks):
    with engine(
        num_kvcache_blocks=num_blocks, max_num_batched_tokens=512, num_decode_steps=num_decode_steps
    ) as llm:
        outputs = llm.generate(PROMPTS, PARAMS, use_tqdm=False)
        assert llm.stats()["num_preemptions"] > 0
        assert outputs == expected
        assert_engine_idle(llm)


def test_rows_longest_first_give_the_same_tokens(expected):
    """`scheduler.longest_first` reorders decode rounds' rows (under preemption too): each request still gets
    the tokens it gets alone."""
    overrides = dict(num_decode_steps=8, scheduler__longest_first=True)
    with engine(num_kvcache_blocks=22, max_num_batched_tokens=512, **overrides) as llm:
        with recorded_steps(llm) as steps:
            outputs = llm.generate(PROMPTS, PARAMS, use_tqdm=False)
        assert llm.stats()["num_preemptions"] > 0
        assert_engine_idle(llm)
    assert outputs == expected
    decodes = [step for step in steps if not step.is_prefill]
    rounds = [[PROMPTS.index(list(prompt)) for prompt in step.prompts] for step in decodes]
    assert any(rows != sorted(rows) for rows in rounds)  # some round did run out of arrival order


def test_outputs_come_back_in_input_order(reference, expected, monkeypatch):
    reference.scheduler.decode.num_decode_steps = 2  # rounds end between finishes (this call only)
    finish_order = []
    step = reference._step

    def recording_step():
        finished = step()
        finish_order.extend(PROMPTS.index(seq.token_ids[: seq.num_prompt_tokens]) for seq in finished)
        return finished

    monkeypatch.setattr(reference, "_step", recording_step)
    outputs = reference.generate(PROMPTS, PARAMS, use_tqdm=False)
    assert sorted(finish_order) == list(range(len(PROMPTS)))
    assert finish_order != sorted(finish_order)  # they did finish out of order
    assert outputs == expected
    assert [len(out["token_ids"]) for out in outputs] == [max_tokens for _, max_tokens in REQUESTS]


def test_without_chunked_prefill_prompts_go_whole(expected):
    budget = 64  # holds the longest prompt but not all of them: prompts wait for a later step
    with engine(num_kvcache_blocks=256, max_num_batched_tokens=budget, chunked_prefill=False) as llm:
        with recorded_steps(llm) as steps:
            outputs = llm.generate(PROMPTS, PARAMS, use_tqdm=False)
    assert outputs == expected
    prefills = [step for step in steps if step.is_prefill]
    assert len(prefills) > 1
    for step in prefills:
        assert step.num_new_tokens == step.num_uncomputed_tokens
        assert sum(step.num_new_tokens) <= budget


def test_chunking_preemption_and_prefix_hits_together(reference):
    """Shared prefixes, a budget that chunks, a cache that preempts and seeded sampling, all at once: each
    request still gets the tokens it gets alone."""
    shared = random_prompt(20, seed=500)
    shapes = [(20, 5), (12, 9), (20, 1), (8, 14), (0, 11), (16, 3)]  # (shared prefix, own tokens)
    prompts = [shared[:n] + random_prompt(m, seed=501 + i) for i, (n, m) in enumerate(shapes)]
    params = [
        SamplingParams(temperature=0.8, top_k=50, seed=seed, max_tokens=4 + 2 * seed)
        for seed in range(len(shapes))
    ]
    alone = [reference.generate([p], sp, use_tqdm=False)[0] for p, sp in zip(prompts, params, strict=True)]
    with engine(num_kvcache_blocks=10, max_num_batched_tokens=8, max_num_seqs=4) as llm:  # preempts
        outputs = llm.generate(prompts, params, use_tqdm=False)
        stats = llm.stats()
        assert_engine_idle(llm)
    assert outputs == alone
    assert stats["num_preemptions"] > 0 and stats["prefix_cache_hit_rate"] > 0


def test_decode_rounds_match_single_steps(expected):
    with engine(num_kvcache_blocks=256, max_num_batched_tokens=512, num_decode_steps=1) as llm:
        with recorded_steps(llm) as steps:
            assert llm.generate(PROMPTS, PARAMS, use_tqdm=False) == expected
    assert all(step.num_new_tokens == [1] * len(step.prompts) for step in steps if not step.is_prefill)


def test_no_sequence_grows_past_max_model_len(reference):
    """prompt + output <= max_model_len, whether a prefill, a decode round or an overlapped one reaches it."""
    max_model_len = reference.config.scheduler.max_model_len
    prompts = [random_prompt(max_model_len - room, seed=150 + room) for room in (1, 2, 5, 21)]
    params = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
    outputs = reference.generate(prompts, params, use_tqdm=False)
    assert [len(o["token_ids"]) for o in outputs] == [1, 2, 5, 21]


def rounds_and_hand_outs(llm):
    """Spies on the scheduler: per decode round scheduled, ("round", steps, whether rounds were one step
    long, prompts waiting, free token-table rows) at that time; per postprocess of a decode round's
    tokens, ("hand out", the most tokens a sequence got)."""
    scheduler, events = llm.scheduler, []
    schedule, schedule_next_round, postprocess = (
        scheduler.schedule,
        scheduler.schedule_next_round,
        scheduler.postprocess,
    )

    def noted(batch):
        if batch is not None and not batch.is_prefill:
            free_rows = len(scheduler.lifecycle.token_rows.free_rows)
            one_step = scheduler.decode.one_step
            events.append(("round", batch.num_steps, one_step, len(scheduler.waiting), free_rows))
        return batch

    def postprocess_spy(batch, tokens, *args):
        if not batch.is_prefill:
            events.append(("hand out", max(len(row) for row in tokens)))
        return postprocess(batch, tokens, *args)

    scheduler.schedule = lambda: noted(schedule())
    scheduler.schedule_next_round = lambda in_flight: noted(schedule_next_round(in_flight))
    scheduler.postprocess = postprocess_spy
    return events


def test_a_saturated_stream_takes_full_rounds_handed_out_step_by_step(expected):
    """With more prompts waiting than there is room for, streams take full decode rounds (waiting prompts
    are then admitted together as a round ends, as `generate` admits them), and the engine hands their
    tokens out one model step at a time. Same tokens as alone."""
    steps = 4
    with engine(num_kvcache_blocks=256, max_num_seqs=2, num_decode_steps=steps) as llm:
        events = rounds_and_hand_outs(llm)
        streamed = {}
        for index, delta in llm.stream(PROMPTS, PARAMS):
            streamed.setdefault(index, []).extend(delta.token_ids)
    assert [streamed[i] for i in range(len(PROMPTS))] == [e.outputs[0].token_ids for e in expected]
    saturated = [event for event in events if event[0] == "round" and event[3] > event[4]]
    assert saturated and not any(one_step for _, _, one_step, _, _ in saturated), events
    assert max(num_steps for _, num_steps, *_ in saturated) == steps
    hand_outs = [event[1] for event in events if event[0] == "hand out"]
    assert hand_outs and all(most == 1 for most in hand_outs), events


def test_a_stream_below_saturation_takes_rounds_of_one_step(expected):
    """With room for every waiting prompt, streams take rounds of one step: a prompt that arrives waits
    for no round to end."""
    with engine(num_decode_steps=4) as llm:
        events = rounds_and_hand_outs(llm)
        outputs = {}
        for index, delta in llm.stream(PROMPTS, PARAMS):
            outputs.setdefault(index, []).extend(delta.token_ids)
    assert [outputs[i] for i in range(len(PROMPTS))] == [e.outputs[0].token_ids for e in expected]
    rounds = [event for event in events if event[0] == "round"]
    assert rounds and all(num_steps == 1 and one_step for _, num_steps, one_step, *_ in rounds), events


def test_a_stream_of_many_sequences_takes_full_rounds():
    """Above `scheduler.one_step_rounds_max_seqs` running sequences, streams take full rounds even with
    room to spare (the host's work for each step of every row would slow the steps); at or below it, rounds
    of one step. The same tokens as `generate`'s."""
    params = [SamplingParams(temperature=0, max_tokens=max_tokens) for max_tokens in (3, 30, 6, 24, 4)]
    with engine(num_decode_steps=4, scheduler__one_step_rounds_max_seqs=2) as llm:
        expected = [output.outputs[0].token_ids for output in llm.generate(PROMPTS, params, use_tqdm=False)]
        events = rounds_and_hand_outs(llm)
        streamed = {}
        for index, delta in llm.stream(PROMPTS, params):
            streamed.setdefault(index, []).extend(delta.token_ids)
    assert [streamed[i] for i in range(len(PROMPTS))] == expected
    one_step = [event[2] for event in events if event[0] == "round"]
    assert one_step[0] is False and one_step[-1] is True, events  # 5 running, then 2


def test_a_stream_below_saturation_admits_a_new_prompt_at_once(reference):
    """With room for it, a prompt that arrives while streams decode is admitted at once: after the round in
    flight, not after a round's worth of steps."""
    llm = reference
    llm.set_streaming(True)
    try:
        first = llm.add_request(PROMPTS[0], SamplingParams(temperature=0, max_tokens=20))
        llm.step(), llm.step(), llm.step()
        second = llm.add_request(PROMPTS[1], SamplingParams(temperature=0, max_tokens=2))
        llm.step(), llm.step()
        assert second.num_uncomputed_tokens <= 1 and not llm.scheduler.waiting
        llm.abort_all()
    finally:
        llm.set_streaming(False)
    assert first is not second
    assert_engine_idle(llm)
