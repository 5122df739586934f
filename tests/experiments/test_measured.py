"""The harness's measured block: what it reports of the requests run inside it alone."""

from __future__ import annotations

import pytest

from experiments.harness.engine import measured
from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm


def test_the_prefix_cache_hit_rate_counts_the_block_alone():
    params = SamplingParams(max_tokens=1)
    with tiny_llm() as llm:
        block = llm.config.cache.block_size
        prompt = random_prompt(3 * block + 5, seed=0)
        llm.generate([prompt], params, use_tqdm=False)  # before the block: computes and caches 3 full blocks
        with measured(llm) as metrics:
            llm.generate([prompt], params, use_tqdm=False)
        assert metrics["prefix_cache_hit_rate"] == pytest.approx(3 * block / len(prompt))
        # the engine's own rate is over its life: the first prompt's lookup found nothing
        assert llm.stats()["prefix_cache_hit_rate"] == pytest.approx(3 * block / (2 * len(prompt)))


def test_kernels_compiled_inside_the_block_are_counted_and_named(capsys):
    pytest.importorskip("triton")
    from tests.helpers.triton_compiles import compile_launch

    with tiny_llm() as llm:
        with measured(llm) as quiet:
            llm.generate([random_prompt(5, seed=1)], SamplingParams(max_tokens=2), use_tqdm=False)
        assert quiet["kernel_compiles"] == 0  # nothing compiles on the CPU
        assert "Warning" not in capsys.readouterr().out
        with measured(llm) as metrics:
            compile_launch("_place_runs_kernel")
        assert metrics["kernel_compiles"] == 1
        assert "Triton compiled 1 kernel(s) inside the measured run" in capsys.readouterr().out
