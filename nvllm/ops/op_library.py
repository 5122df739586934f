"""How nvllm defines its custom ops: each on the `nvllm` library fragment, its schema inferred from the
function's annotations (as `torch.library.custom_op` infers it), one implementation for every device (the
function branches on the device itself) and no autograd formula (the engine only infers).

`torch.library.custom_op` would wrap every call in Python layers of its own (an autograd wrapper that
redispatches, checks of the outputs' aliasing) on top of the dispatcher's call into the function. A step
that no CUDA graph holds launches a model's ops from Python, eight of them a decoder layer, and pays those
layers at each (`experiments/results/2026-12-03-h200-serving-prefill-graphs.md`); here the dispatcher calls
the function directly (`experiments/results/2026-12-03-cpu-op-dispatch.md`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

_LIBRARY = torch.library.Library("nvllm", "FRAGMENT")


def inference_op(
    name: str, *, mutates_args: Sequence[str] = (), tags: Sequence[torch.Tag] = ()
) -> Callable[[Callable], torch._ops.OpOverload]:
    """Decorator: `torch.ops.nvllm.<name>` computed by the decorated function, which mutates the arguments
    named in `mutates_args` in place (they must be tensors); returns the op to call."""

    def define(function: Callable) -> torch._ops.OpOverload:
        schema = torch.library.infer_schema(function, mutates_args=tuple(mutates_args))
        _LIBRARY.define(name + schema, tags=(*tags, torch.Tag.pt2_compliant_tag))
        _LIBRARY.impl(name, function, "CompositeExplicitAutograd")
        return getattr(torch.ops.nvllm, name).default

    return define


def register_fake(op: torch._ops.OpOverload) -> Callable[[Callable], Callable]:
    """Decorator: the op's output shapes, dtypes and devices from its inputs', without computing (what
    torch.compile traces with)."""
    return torch.library.register_fake(op, lib=_LIBRARY)
