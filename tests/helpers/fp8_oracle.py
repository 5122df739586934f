"""transformers' models as oracles for fp8 engines: what `model.fp8_activations` does to a matmul's input."""

from __future__ import annotations

import torch

from nvllm.ops.fp8 import quantize_tokens


def quantize_inputs_per_token(layers: torch.nn.Module, skip: tuple[str, ...] = ()) -> None:
    """Every `nn.Linear` in `layers` (but those whose name ends with one of `skip`) given an input
    quantized a scale per token and dequantized, as the engine's fp8 matmuls quantize theirs with
    `model.fp8_activations` (`nvllm.ops.fp8.quantize_tokens`)."""

    def quantized(module, args):
        x = args[0]
        q, scale = quantize_tokens(x)
        return ((q.float() * scale[:, None]).view(x.shape).to(x.dtype), *args[1:])

    for name, module in layers.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith(skip):
            module.register_forward_pre_hook(quantized)
