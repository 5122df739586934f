"""`triton_compiles`: the Triton kernels compiled inside a block, as Triton's compile hook reports them. On
the CPU no kernel compiles, so these call the hook as Triton calls it before it compiles a launch it has not
seen (`JITFunction._do_compile`); the GPU test in `tests/experiments/test_warm_up_gpu.py` has real ones."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nvllm.profiling.kernel_compiles import triton_compiles

knobs = pytest.importorskip("triton").knobs


def compile_launch(name: str):
    """What Triton does before it compiles a kernel (`name`) for a new launch: call its cache hook, whose
    true result would skip the compile."""
    hook = knobs.runtime.jit_cache_hook
    if hook is None:
        return None
    fn = SimpleNamespace(module=None, name=name, jit_function=None)
    return hook(key=(), repr=name, fn=fn, compile={}, is_manual_warmup=False, already_compiled=False)


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
