"""The objects start-up leaves are out of the garbage collector's full passes while the engine lives, and
back in them once it shuts down."""

import gc

from nvllm import SamplingParams
from tests.helpers.engine_utils import tiny_llm


def test_startup_objects_are_frozen_while_the_engine_lives():
    gc.unfreeze()
    with tiny_llm() as llm:
        model = llm.model_runner.model
        # the model is in no generation a collection walks (frozen objects are in none of them)
        assert gc.get_freeze_count() > 1000 and all(obj is not model for obj in gc.get_objects())
        llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2), use_tqdm=False)
        del model
    assert gc.get_freeze_count() == 0
