"""Prefix-grouped admission (`scheduler.group_prefixes`): requests sharing a prefix compute it once and
run together; no request waits behind more than `max_bypass` later ones."""

from nvllm import SamplingParams
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.prefix_grouping import PrefixGrouping
from nvllm.scheduler.sequence import Sequence
from tests.helpers.engine_utils import random_prompt, recorded_steps, tiny_llm

BLOCK = 4
PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def run(prompts, group_prefixes: bool):
    with (
        tiny_llm(kvcache_block_size=BLOCK, max_model_len=64, scheduler__group_prefixes=group_prefixes) as llm,
        recorded_steps(llm) as steps,
    ):
        outputs = llm.generate(prompts, PARAMS, use_tqdm=False)
        stats = llm.stats()
    return outputs, steps, stats


def test_one_request_computes_a_shared_prefix_and_the_others_find_it_cached():
    prefix = random_prompt(24, 1)
    prompts = [prefix + random_prompt(3, 10 + i) for i in range(6)]
    grouped, steps, stats = run(prompts, group_prefixes=True)
    plain, plain_steps, plain_stats = run(prompts, group_prefixes=False)
    assert grouped == plain
    assert [len(step.prompts) for step in steps if step.is_prefill] == [1, 5]  # the leader, then the rest
    assert len(plain_steps[0].prompts) == 6  # all at once, each computing the prefix
    assert stats["prefill_tokens"] == 24 + 6 * 3
    assert plain_stats["prefill_tokens"] == 6 * 27


def test_interleaved_prefixes_are_admitted_group_by_group():
    prefixes = [random_prompt(12, 2), random_prompt(12, 3)]
    prompts = [prefixes[i % 2] + random_prompt(2, 20 + i) for i in range(8)]
    loner = random_prompt(6, 40)  # no prefix to share: admitted in its turn
    grouped, steps, stats = run(prompts + [loner], group_prefixes=True)
    assert grouped == run(prompts + [loner], group_prefixes=False)[0]
    prefill = [step.prompts for step in steps if step.is_prefill]
    first_block = {tuple(prefix[:BLOCK]): name for name, prefix in zip("AB", prefixes)}

    def names(prompt_list):
        return [first_block.get(prompt[:BLOCK], "loner") for prompt in prompt_list]

    assert names(prefill[0]) == ["A", "B", "loner"]  # one leader per group
    assert sorted(names(prefill[1])) == ["A"] * 3 + ["B"] * 3
    assert stats["prefill_tokens"] == 2 * 12 + 8 * 2 + 6


def test_reordering_is_bounded():
    grouping = PrefixGrouping(BlockManager(num_blocks=8, block_size=BLOCK), max_bypass=3)
    cold = random_prompt(2 * BLOCK, 5)
    leader, held = Sequence(cold + [1], PARAMS), Sequence(cold + [2], PARAMS)
    leader.computed_len = 0  # its prompt is still being computed: members of its group wait
    others = [Sequence(random_prompt(2 * BLOCK, 60 + i), PARAMS) for i in range(5)]
    waiting = [held] + others
    for admitted_now in ([others[0]], [others[1], others[2]]):
        order = grouping.admission_order(waiting, [leader])
        assert held not in order and order[0] is admitted_now[0]
        grouping.admitted(admitted_now, waiting)
        waiting = [seq for seq in waiting if seq not in admitted_now]
    # overtaken three times: first in line, although its group's prefix is still being computed
    assert grouping.admission_order(waiting, [leader])[0] is held


def test_members_of_a_running_group_go_first():
    grouping = PrefixGrouping(BlockManager(num_blocks=8, block_size=BLOCK), max_bypass=3)
    shared = random_prompt(2 * BLOCK, 7)
    running = Sequence(shared + [1], PARAMS)
    running.computed_len = running.host_len  # its prompt is computed: the prefix is in the cache
    earlier, member = Sequence(random_prompt(2 * BLOCK, 8), PARAMS), Sequence(shared + [2], PARAMS)
    short = Sequence(random_prompt(BLOCK, 9), PARAMS)  # no full block to share: no group
    assert grouping.admission_order([earlier, short, member], [running]) == [member, earlier, short]


def test_grouping_never_admits_a_lower_priority_before_a_higher_one():
    prefix = random_prompt(24, 1)
    settings = dict(kvcache_block_size=BLOCK, max_model_len=64, scheduler__policy="priority")
    with tiny_llm(scheduler__group_prefixes=True, **settings) as llm:
        for i in range(6):
            llm.add_request(prefix + random_prompt(3, 10 + i), PARAMS, priority=1)
        llm.step()  # the group's leader computes the prefix: the others are now a warm group
        urgent = llm.add_request(random_prompt(6, 40), PARAMS, priority=0)
        order = llm.scheduler.admission.order()
        assert order[0] is urgent and len(order) == 6  # then the warm group, by arrival
        assert [seq.priority for seq in order[1:]] == [1] * 5
