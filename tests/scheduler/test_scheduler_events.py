"""The scheduler's records of what it did to requests (admitted, preempted, released), which the engine drains
and hands on: to the profiler, and to the sampler's token histories."""

from nvllm import SamplingParams
from nvllm.scheduler.events import EventKind
from nvllm.scheduler.sequence import Sequence
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.helpers.scheduler_utils import EOS, bare_scheduler, run_step


def kinds(scheduler):
    return [(event.kind, event.seq) for event in scheduler.take_events()]


def test_admission_preemption_and_finish_are_recorded_in_order():
    scheduler = bare_scheduler(num_blocks=3, num_decode_steps=1)
    # prompts of one block each, different: no prefix-cache hit lets `new` back in while `old` runs
    old, new = (Sequence(prompt, SamplingParams(max_tokens=10)) for prompt in ([1, 2, 3, 4], [5, 6, 8, 9]))
    for seq in (old, new):
        scheduler.add(seq)
    run_step(scheduler)
    assert kinds(scheduler) == [(EventKind.SCHEDULED, old), (EventKind.SCHEDULED, new)]
    run_step(scheduler)  # `new` is preempted to give `old` a second block
    assert kinds(scheduler) == [(EventKind.RELEASED, new), (EventKind.PREEMPTED, new)]
    run_step(scheduler, token_id=EOS)
    assert kinds(scheduler) == [(EventKind.RELEASED, old)] and kinds(scheduler) == []


def test_a_sequence_that_stops_running_gives_back_its_penalty_history():
    penalised = SamplingParams(temperature=0, max_tokens=6, repetition_penalty=1.3, ignore_eos=True)
    with tiny_llm() as llm:
        seqs = [llm.add_request(random_prompt(9, seed), penalised) for seed in range(3)]
        llm.step()  # the prefill builds every history
        assert all(seq.penalty_history is not None for seq in seqs)
        while not llm.is_finished():
            llm.step()
    assert all(seq.is_finished and seq.penalty_history is None for seq in seqs)
