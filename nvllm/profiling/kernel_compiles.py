"""The Triton kernels compiled while a block of code runs: nvllm's own kernels (those launched through
`@triton.jit`) that Triton compiled, or loaded from its disk cache, for a launch it had not seen in this
process. Triton compiles again for every new specialization of a launch (a constexpr, an integer argument's
divisibility by 16), so a kernel compiled inside a measured run is a launch shape start-up's warm-ups
(`nvllm.runner.prefill_warm_up`, the CUDA graphs' capture) missed, and its compile is in the measured time
(experiments/results/2026-12-06-h100-prefill-compiles.md). Inductor's kernels are compiled with the model
and are not counted; under tensor parallelism only this process's kernels are."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def triton_compiles() -> Iterator[list[str] | None]:
    """Yields the list the names of the kernels Triton compiles inside the block are appended to, in order
    (a name each time); None where Triton is missing or has no compile hook (`triton.knobs`, Triton 3.4 and
    later). A hook set before is still called, and set again after the block."""
    try:
        from triton import knobs

        runtime = knobs.runtime
        previous = runtime.jit_cache_hook
    except (ImportError, AttributeError):
        yield None
        return
    names: list[str] = []

    def hook(**kwargs):
        names.append(kwargs["fn"].name)
        # a true result would tell Triton not to compile
        return previous(**kwargs) if previous is not None else False

    runtime.jit_cache_hook = hook
    try:
        yield names
    finally:
        runtime.jit_cache_hook = previous
