"""A mixture-of-experts router's choice, in torch: each token's `top_k` experts and their weights from the
router's logits, and the rule for the step's padding tokens (no expert: the id one past the last). The CPU
routes with these; the Triton routing of CUDA batches (`nvllm.ops.moe_route_triton`,
`nvllm.ops.moe_route_tokens_triton`) computes the same and is tested against them.

Router ties: among equal probabilities the lower expert index is chosen first, on every device (a stable
sort). `torch.topk`, which transformers' router uses, has no rule for ties (on the CPU it may return any of
the equal ones), so on an exact tie the two may choose different experts; otherwise they agree."""

from __future__ import annotations

import torch


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The chosen experts of each token and their weights: softmax over the experts in fp32, the `top_k`
    largest (ties to the lower index), renormalised to sum to 1 when `renormalize`, in the logits' dtype."""
    probabilities = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.sort(probabilities, dim=-1, descending=True, stable=True)
    weights, ids = weights[:, :top_k], ids[:, :top_k]
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), ids


def padding_to_no_expert(
    weights: torch.Tensor, ids: torch.Tensor, padding: torch.Tensor, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The routing with each padding token sent to no expert: expert `num_experts` (one past the last) at
    weight 0. The experts' kernels sort no pair of it into their tiles and the sum of a token's pairs adds
    none of it, so its output is zeros. Routed by their own (meaningless) hidden states, padding tokens
    would read experts of their own: a single stream, padded to two rows, would read up to twice the
    experts' bytes a step; sent to the first token's experts, as they once were, they added row tiles to
    those experts' (experiments/results/2026-12-06-h100-fp16-down-and-decode-shapes/padding-tiles.txt)."""
    padding = padding[:, None]
    return torch.where(padding, 0.0, weights).to(weights.dtype), torch.where(padding, num_experts, ids)


def route_step(
    router_logits: torch.Tensor, padding: torch.Tensor | None, top_k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """A step's routing: `route`, then `padding_to_no_expert` where the step has a `padding` mask [T]."""
    weights, ids = route(router_logits, top_k, renormalize)
    if padding is not None:
        weights, ids = padding_to_no_expert(weights, ids, padding, router_logits.shape[-1])
    return weights, ids
