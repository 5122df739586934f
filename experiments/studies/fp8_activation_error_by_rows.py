"""How the fp8-activation experts' distance from their torch reference grows with the number of tokens, for
the same per-element error, on the CPU: what the GPU test of those kernels
(`tests/models/test_qwen3_moe_gpu.py::test_the_grouped_matmuls_on_fp8_activations_equal_the_reference`)
measures, against what a kernel's own arithmetic can explain.

A kernel differs from the reference (`nvllm.ops.moe_ops.experts_reference`, `quantize_activations=True`)
by its order of fp32 sums and the fp8 MMA's accumulation. Each such difference is tiny, but where it moves
an element of the intermediate `silu(gate) * up` across an e4m3 rounding boundary, that element moves by a
whole e4m3 step (an eighth of its value at most). Here that error is modelled as relative gaussian noise of
size `eps` on every element of the intermediate before its quantization. Printed per batch size: the
largest per-token relative L2 error (the test's measure), the relative L2 error of the whole output, and the
test's bound (a quarter of how far bf16 activations are from the reference, at most 1 %); and the same with
the intermediate rounded to bf16 instead (a kernel that lost fp32's precision there). Qwen3-30B-A3B's layer
shape, the GPU test's input distributions.

`python -m experiments.studies.fp8_activation_error_by_rows [--tokens 64,256,4096] [--eps 1e-5,3e-5,1e-4]`"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from unittest import mock

import torch

from experiments.studies.fp8_moe_layer_error import HIDDEN, INTERMEDIATE, NUM_EXPERTS, TOP_K
from nvllm.ops import moe_ops
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_routing import route
from tests.helpers.parallel_oracle import relative_error, whole_relative_error


def layer(tokens: int, seed: int) -> tuple:
    """The GPU test's inputs, drawn on the CPU: gaussian hidden states, experts of unit-gain scale quantized a
    scale per row, random routing; hidden states and routing weights in bf16."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape, std):
        return torch.randn(*shape, generator=generator) * std

    x = normal(tokens, HIDDEN, std=1.0)
    gate_up = normal(NUM_EXPERTS, 2 * INTERMEDIATE, HIDDEN, std=HIDDEN**-0.5)
    down = normal(NUM_EXPERTS, HIDDEN, INTERMEDIATE, std=INTERMEDIATE**-0.5)
    weights, ids = route(normal(tokens, NUM_EXPERTS, std=1.0), TOP_K, renormalize=True)
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    return x.bfloat16(), gate_up_q, down_q, weights.bfloat16(), ids, gate_up_scale, down_scale


def with_intermediate(layer_inputs: tuple, change: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The reference with `change` applied to the intermediate before its quantization."""
    quantize_groups = moe_ops.quantize_groups

    def changed(values: torch.Tensor, group: int):
        return quantize_groups(change(values), group)

    with mock.patch.object(moe_ops, "quantize_groups", changed):
        return moe_ops.experts_reference(*layer_inputs, quantize_activations=True).float()


def with_noise(layer_inputs: tuple, eps: float, seed: int) -> torch.Tensor:
    """The reference with relative noise `eps` on the intermediate before its quantization."""
    generator = torch.Generator().manual_seed(seed)
    return with_intermediate(
        layer_inputs, lambda values: values * (1 + eps * torch.randn(values.shape, generator=generator))
    )


def main(token_counts: list[int], noise: list[float]) -> None:
    for tokens in token_counts:
        inputs = layer(tokens, seed=tokens)
        reference = moe_ops.experts_reference(*inputs, quantize_activations=True).float()
        x, gate_up, down, weights, *rest = inputs
        on_bf16 = moe_ops.experts_reference(x.float(), gate_up, down, weights.float(), *rest)
        bound = min(1e-2, 0.25 * relative_error(on_bf16, reference))
        line = f"{tokens:5d} tokens: the test's bound {bound:.4f}"
        for eps in noise:
            noisy = with_noise(inputs, eps, seed=tokens + 1)
            line += (
                f" | noise {eps:g}: largest token {relative_error(noisy, reference):.4f}, "
                f"whole {whole_relative_error(noisy, reference):.4f}"
            )
        rounded = with_intermediate(inputs, lambda values: values.bfloat16().float())
        line += (
            f" | rounded to bf16: largest token {relative_error(rounded, reference):.4f}, "
            f"whole {whole_relative_error(rounded, reference):.4f}"
        )
        print(line, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="64,256,4096", help="comma-separated token counts")
    parser.add_argument("--eps", default="1e-5,3e-5,1e-4", help="comma-separated relative noise sizes")
    args = parser.parse_args()
    main([int(t) for t in args.tokens.split(",")], [float(e) for e in args.eps.split(",")])
