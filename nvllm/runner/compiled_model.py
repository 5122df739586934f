"""The model compiled region by region by `torch.compile(fullgraph=True, dynamic=True)`: one graph per region
serves prefill and decode (a decode step is a batch of one-token sequences, and every size the graph takes is
padded past 1)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
import torch._dynamo.config
import torch.fx.experimental._config
from torch import nn

RECOMPILE_LIMIT = 64  # graphs a region's code may hold: see compile_settings

# Inductor passes to the compiler of every region. Fused into one kernel, two ops in bf16 would otherwise
# skip the rounding to bf16 between them that eager mode does: an fp8 matmul's activations, quantized in the
# kernel of the norm or the activation before it, would be quantized from values eager never sees, so that a
# compiled batch and an eager one (or a compiled batch of 16 rows and one of 17) disagree by fp8's rounding
# steps, not bf16's.
INDUCTOR_OPTIONS = {"emulate_precision_casts": True}


@contextmanager
def compile_settings() -> Iterator[None]:
    """The torch settings the engine's graphs are traced with, in force only while the compiled model runs
    (where dynamo traces or recompiles), so that code around the engine sees torch's own."""
    with ExitStack() as stack:
        # Sizes that happen to be equal at trace time (tokens = head_dim, say) would otherwise be assumed
        # equal forever, and every batch that breaks the coincidence would compile again.
        stack.enter_context(torch.fx.experimental._config.patch(use_duck_shape=False))
        # Python floats (norm eps, attention scale) as constants. Left symbolic under dynamic=True, each one
        # makes inductor's scalar pass restart the analysis: every compile would trace the model twice.
        stack.enter_context(torch._dynamo.config.patch(specialize_float=True))
        # Dynamo keeps compiled graphs per code object, and every model's decoder layers run their class's
        # one `forward`: each model of another shape or family adds its graphs (two a layer class, with
        # cascade's), and past the limit a fullgraph region fails. Engines built one after another in a
        # process (a sweep, a test session) would meet the default (8) by the fifth model. An engine of a
        # model seen before reuses its graphs, and adds none.
        stack.enter_context(torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT))
        yield


class CompiledModel:
    """The model with its `compile_regions()` compiled in place, each by `torch.compile(fullgraph=True,
    dynamic=True)` (regional compilation): dynamo traces a decoder layer once and every other layer passes
    its guards (their parameters and KV caches are graph inputs, not constants), so inductor compiles one
    layer's graph instead of the whole unrolled model. Call it as the model; `eager(...)` runs the same
    model without its compiled regions. `check_guards=False` skips dynamo's guard checks, which cost host
    time on every region's call. Only for calls that can only pass them: the runner skips them for decode
    steps once every decode shape has run (a dynamic-shape entry per region then serves them all; with fp8
    weights two, told apart by the row count: `nvllm.ops.fp8_linear_ops`).
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.regions: list[nn.Module] = model.compile_regions()
        for region in self.regions:
            # the region's own `forward`, not `nn.Module.compile`'s `_call_impl`: dynamo keeps compiled graphs
            # per code object, up to a recompile limit, and `_call_impl` is every module's code
            region.forward = torch.compile(
                region.forward, fullgraph=True, dynamic=True, options=INDUCTOR_OPTIONS
            )

    def __call__(self, *args, check_guards: bool = True) -> torch.Tensor:
        with compile_settings():
            if check_guards:
                return self.model(*args)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self.model(*args)

    def eager(self, *args) -> torch.Tensor:
        with torch.compiler.set_stance("force_eager"):
            return self.model(*args)

    def release(self) -> None:
        """Drop the compiled regions: each holds its module (a reference cycle that would keep the weights
        until a garbage collection)."""
        for region in self.regions:
            del region.forward  # the instance's compiled forward: its class's plain one shows again
        self.regions = []
