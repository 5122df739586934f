"""experiments.studies.gc_pauses: the full collections that run inside `generate`, and only those."""

import gc

from experiments.studies.gc_pauses import full_collections
from nvllm import SamplingParams
from tests.helpers.engine_utils import tiny_llm


def test_counts_the_full_collections_inside_generate_calls_only():
    steps_of_call = []  # one full collection per step of each generate call
    gc.disable()  # no automatic collection: the test's own are the only ones
    try:
        with tiny_llm() as llm:
            step = llm._step  # what generate runs each step

            def step_with_a_collection():
                gc.collect()
                gc.collect(1)  # not a full collection
                steps_of_call[-1] += 1
                return step()

            llm._step = step_with_a_collection
            params = SamplingParams(max_tokens=3, ignore_eos=True, temperature=0)
            with full_collections() as found:
                for prompts in ([[1, 2, 3]], [[1, 2, 3], [4, 5, 6, 7]]):
                    gc.collect()  # outside generate
                    steps_of_call.append(0)
                    llm.generate(prompts, params, use_tqdm=False)
            steps_of_call.append(0)
            llm.generate([[1, 2]], params, use_tqdm=False)  # no longer watched
    finally:
        gc.enable()
    expected = [call for call, num_steps in enumerate(steps_of_call[:2], start=1) for _ in range(num_steps)]
    assert expected and [collection.generate_call for collection in found] == expected
    assert all(collection.duration_ms > 0 and collection.start_s > 0 for collection in found)
