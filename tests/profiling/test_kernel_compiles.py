"""`triton_compiles`: the Triton kernels compiled inside a block, as Triton's compile hook reports them. On
the CPU no kernel compiles, so these call the hook as Triton calls it before it compiles a launch it has not
seen (`tests.helpers.triton_compiles`); the GPU test in `tests/runner/test_prefill_warm_up_gpu.py` has real
ones."""

from __future__ import annotations

import pytest

from nvllm.profiling.kernel_compiles import triton_compiles
from tests.helpers.triton_compiles import compile_launch

knobs = pytest.importorskip("triton").knobs


def test_the_kernels_compiled_inside_the_block_are_named_in_order():
    compile_launch("before")
    with triton_compiles() as compiled:
        assert compiled == []
        for name in ("_place_runs_kernel", "_quantize_tokens_kernel", "_place_runs_kernel"):
            assert not compile_launch(name)  # Triton still compiles
    compile_launch("after")
    assert compiled == ["_place_runs_kernel", "_quantize_tokens_kernel", "_place_runs_kernel"]
    assert knobs.runtime.jit_cache_hook is None


def test_a_hook_set_before_still_sees_every_compile_and_is_set_again_after(monkeypatch):
    seen = []

    def earlier_hook(**kwargs):
        seen.append(kwargs["fn"].name)
        return True  # its answer stands: here, do not compile

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", earlier_hook)
    with pytest.raises(RuntimeError), triton_compiles() as compiled:
        assert compile_launch("_count_chunks_kernel") is True
        raise RuntimeError("the block fails")
    assert compiled == seen == ["_count_chunks_kernel"]
    assert knobs.runtime.jit_cache_hook is earlier_hook
