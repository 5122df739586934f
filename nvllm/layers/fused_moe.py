"""A mixture-of-experts MLP: a router picks `top_k` of `num_experts` gated MLPs per token, whose outputs are
summed with the router's weights (`nvllm::fused_experts`).

The experts' weights are stacked, `gate_up_proj` `[E, 2 * I, H]` (each expert's gate rows, then its up
rows) and `down_proj` `[E, H, I]`. Tensor parallelism splits every expert's intermediate dimension over the
ranks, as the dense MLP's: each rank holds its slice of every expert, the router and the routing are whole on
every rank (so they agree on the experts), and the partial outputs are summed by one all-reduce a layer.

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

from nvllm.distributed.group import all_reduce, tp_rank, tp_size
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
    """Every expert's gate/up and down weights, this rank's slice of each expert's intermediate dimension."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int):
        super().__init__()
        if intermediate_size % tp_size():
            raise ValueError(
                f"moe_intermediate_size={intermediate_size} does not split over {tp_size()} ranks"
            )
        self.local_size = intermediate_size // tp_size()
        self.gate_up_proj = nn.Parameter(
            torch.empty(num_experts, 2 * self.local_size, hidden_size), requires_grad=False
        )
        self.down_proj = nn.Parameter(
            torch.empty(num_experts, hidden_size, self.local_size), requires_grad=False
        )

    def shard_ids(self) -> dict[str, list[tuple[int, ...]]]:
        """The checkpoint tensors each parameter is written from: (expert, 0 gate | 1 up) and (expert,)."""
        experts = range(self.gate_up_proj.shape[0])
        return {
            "gate_up_proj": [(e, part) for e in experts for part in (0, 1)],
            "down_proj": [(e,) for e in experts],
        }

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, expert: int, part: int = 0) -> None:
        """One expert's unsharded gate, up (`[I, H]`) or down (`[H, I]`) tensor: this rank's slice of I."""
        start = tp_rank() * self.local_size
        if param is self.down_proj:
            param.data[expert].copy_(full[:, start : start + self.local_size])
        else:
            rows = slice(part * self.local_size, (part + 1) * self.local_size)
            param.data[expert, rows].copy_(full[start : start + self.local_size])


class FusedMoE(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_experts: int,
        top_k: int,
        intermediate_size: int,
        renormalize: bool,
        routing_kernel: bool = False,
    ):
        super().__init__()
        self.top_k, self.renormalize, self.routing_kernel = top_k, renormalize, routing_kernel
        self.gate = Router(hidden_size, num_experts)
        self.experts = ExpertWeights(num_experts, hidden_size, intermediate_size)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        """`padding` [T] bool: the step's padding tokens, whose outputs nobody reads
        (`nvllm.ops.moe_routing.padding_follows_first`)."""
        gate_up, down = self.experts.gate_up_proj, self.experts.down_proj
        logits = self.gate(x)
        if self.routing_kernel:
            out = routed_experts(x, gate_up, down, logits, padding, self.top_k, self.renormalize)
        else:
            out = fused_experts(x, gate_up, down, *route_step(logits, padding, self.top_k, self.renormalize))
        return all_reduce(out)
