"""transformers' models as oracles for fp8 engines: what `model.fp8_activations` does to a matmul's input."""

from __future__ import annotations

import torch

from nvllm.ops.fp8 import quantize_tokens


def quantize_inputs_per_token(
    layers: torch.nn.Module, skip: tuple[str, ...] = (), ranks: int = 1, row_parallel: tuple[str, ...] = ()
) -> None:
    """Every `nn.Linear` in `layers` (but those whose name ends with one of `skip`) given an input
    quantized a scale per token and dequantized, as the engine's fp8 matmuls quantize theirs with
    `model.fp8_activations` (`nvllm.ops.fp8.quantize_tokens`). Those whose name ends with one of
    `row_parallel` have their input's features cut into `ranks` slices, each quantized on its own, as each
    rank of a tensor-parallel engine quantizes the slice it holds of a row-parallel projection's input."""

    def quantized(x):
        q, scale = quantize_tokens(x.contiguous())
        return (q.float() * scale[:, None]).view(x.shape).to(x.dtype)

    def quantized_in_slices(slices: int):
        def hook(module, args):
            return (torch.cat([quantized(part) for part in args[0].chunk(slices, dim=-1)], dim=-1), *args[1:])

        return hook

    for name, module in layers.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith(skip):
            slices = ranks if name.endswith(row_parallel) else 1
            module.register_forward_pre_hook(quantized_in_slices(slices))
