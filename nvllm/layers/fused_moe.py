"""A mixture-of-experts MLP: a router picks `top_k` of `num_experts` gated MLPs per token, whose outputs are
summed with the router's weights (`nvllm::fused_experts`).

The experts' weights are stacked, `gate_up_proj` `[E, 2 * I, H]` (each expert's gate rows, then its up
rows) and `down_proj` `[E, H, I]`. Tensor parallelism splits every expert's intermediate dimension over the
ranks, as the dense MLP's: each rank holds its slice of every expert, the router and the routing are whole on
every rank (so they agree on the experts), and the partial outputs are summed by one all-reduce a layer.

With `quantization="fp8"` the experts are stored in float8 with a scale per output row of each expert, as the
dense layers' weights (`nvllm.ops.fp8`): a row's scale is taken over the whole checkpoint row before this
rank's slice is cut, so TP=N holds exactly the slices of the TP=1 experts. With `fp8_activations`
(`model.fp8_activations`) the experts multiply activations quantized to fp8 too
(`nvllm.ops.moe_fp8_triton`). Its intermediate has a scale a row by default
(`nvllm.ops.moe_tiles.FP8_INTERMEDIATE_PER_ROW`): each rank scales its slice of a row, so TP=N quantizes it
differently from TP=1. In groups (that setting off) TP=N quantizes it as TP=1 does where each rank's slice
is a whole number of groups (`FP8_INTERMEDIATE_GROUP`). The router stays in the model's
dtype: its weight is a sliver of a layer's (128 x 2048 against 128 experts of 3 x 768 x 2048 in
Qwen3-30B-A3B), and its choices decide which experts run.

Expert parallelism (whole experts per rank) is not built. Its place is `ExpertWeights`: it would hold the
experts `[rank * E / ranks, (rank + 1) * E / ranks)` whole, and the layer would send each (token, choice)
pair to its expert's rank and back (two all-to-alls around `nvllm::fused_experts`, over the local experts)
instead of the all-reduce.

The routing (softmax, top-k, its rule on ties, the padding tokens') is `nvllm.ops.moe_routing`'s: compiled
into the layer's graph before `nvllm::fused_experts`, or, with `routing_kernel` (`model.moe_routing_kernel`),
inside `nvllm::routed_experts`, which routes a CUDA batch with Triton kernels (a small one in one kernel)."""

from __future__ import annotations

import torch
from torch import nn

from nvllm.config import QUANTIZATIONS
from nvllm.distributed.group import all_reduce, tp_rank, tp_size
from nvllm.ops.fp8 import FP8, quantize_rows
from nvllm.ops.linear_ops import apply_linear
from nvllm.ops.moe_ops import fused_experts, routed_experts
from nvllm.ops.moe_routing import route_step


class Router(nn.Module):
    """The router's `[E, H]` weight, whole on every rank."""

    def __init__(self, hidden_size: int, num_experts: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_linear(x, self.weight)


class ExpertWeights(nn.Module):
    """Every expert's gate/up and down weights, this rank's slice of each expert's intermediate dimension;
    quantized, in fp8 with a scale per row (`gate_up_scale` `[E, 2 * I]`, `down_scale` `[E, H]`)."""

    def __init__(
        self, num_experts: int, hidden_size: int, intermediate_size: int, quantization: str = "none"
    ):
        super().__init__()
        assert quantization in QUANTIZATIONS, f"quantization={quantization!r}"
        if intermediate_size % tp_size():
            raise ValueError(
                f"moe_intermediate_size={intermediate_size} does not split over {tp_size()} ranks"
            )
        self.local_size = intermediate_size // tp_size()
        quantized = quantization == "fp8"
        dtype = FP8 if quantized else None
        gate_up_shape = (num_experts, 2 * self.local_size, hidden_size)
        down_shape = (num_experts, hidden_size, self.local_size)
        self.gate_up_proj = nn.Parameter(torch.empty(gate_up_shape, dtype=dtype), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(down_shape, dtype=dtype), requires_grad=False)
        for name, shape in (("gate_up_scale", gate_up_shape[:2]), ("down_scale", down_shape[:2])):
            self.register_buffer(name, torch.empty(shape, dtype=torch.float32) if quantized else None)

    def shard_ids(self) -> dict[str, list[tuple[int, ...]]]:
        """The checkpoint tensors each parameter is written from: (expert, 0 gate | 1 up) and (expert,)."""
        experts = range(self.gate_up_proj.shape[0])
        return {
            "gate_up_proj": [(e, part) for e in experts for part in (0, 1)],
            "down_proj": [(e,) for e in experts],
        }

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, expert: int, part: int = 0) -> None:
        """One expert's unsharded gate, up (`[I, H]`) or down (`[H, I]`) tensor: this rank's slice of I;
        quantized, with the scales of its whole rows."""
        quantized = self.down_scale is not None
        scale = None
        if quantized:
            full, scale = quantize_rows(full)
        mine = slice(tp_rank() * self.local_size, (tp_rank() + 1) * self.local_size)
        if param is self.down_proj:
            param.data[expert].copy_(full[:, mine])
            if quantized:
                self.down_scale[expert].copy_(scale)
        else:
            rows = slice(part * self.local_size, (part + 1) * self.local_size)
            param.data[expert, rows].copy_(full[mine])
            if quantized:
                self.gate_up_scale[expert, rows].copy_(scale[mine])

    def scales(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The gate/up and down scales of fp8 experts (None, None unquantized)."""
        return self.gate_up_scale, self.down_scale


class FusedMoE(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_experts: int,
        top_k: int,
        intermediate_size: int,
        renormalize: bool,
        routing_kernel: bool = False,
        quantization: str = "none",
        fp8_activations: bool = False,
    ):
        super().__init__()
        assert not fp8_activations or quantization == "fp8", "fp8 activations need fp8 experts"
        self.top_k, self.renormalize, self.routing_kernel = top_k, renormalize, routing_kernel
        self.fp8_activations = fp8_activations
        self.gate = Router(hidden_size, num_experts)
        self.experts = ExpertWeights(num_experts, hidden_size, intermediate_size, quantization)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """`padding` [T] bool: the step's padding tokens, whose outputs nobody reads
        (`nvllm.ops.moe_routing.padding_to_no_expert`)."""
        gate_up, down = self.experts.gate_up_proj, self.experts.down_proj
        quantized = (*self.experts.scales(), self.fp8_activations)
        logits = self.gate(x)
        if self.routing_kernel:
            out = routed_experts(x, gate_up, down, logits, padding, self.top_k, self.renormalize, *quantized)
        else:
            routing = route_step(logits, padding, self.top_k, self.renormalize)
            out = fused_experts(x, gate_up, down, *routing, *quantized)
        return all_reduce(out)
