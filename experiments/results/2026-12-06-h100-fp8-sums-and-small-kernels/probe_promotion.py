"""Qwen3-30B-A3B's experts on fp8 activations with each reduction slice's sums promoted to fp32
(`moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32`, the default) and accumulated in the tensor cores over the whole
loop: the layer's time at decode and prefill batches (promoted, then not, then promoted again; and on bf16
activations, as decode batches run), and each
way's error from the torch reference (which sums in fp32) and from float32 experts on unquantized
activations (largest per-token relative L2 error, as `experiments.studies.fp8_moe_layer_error` counts)."""

from functools import partial

import torch

from experiments.kernels.moe_bench import layer_experts, routed_batch
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import moe_tiles
from nvllm.ops.moe_fp8_triton import quantize_tokens
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_triton import align_by_expert, grouped_experts, sum_pairs

TIMED_TOKENS = (256, 1024, 2048, 8192, 16384)
CHECKED_TOKENS = (3, 64, 256, 2048)


def largest_token_error(ours: torch.Tensor, exact: torch.Tensor) -> float:
    return ((ours - exact).norm(dim=1) / exact.norm(dim=1).clamp_min(1e-30)).max().item()


def main() -> None:
    torch.manual_seed(0)
    gate_up, down, gate_up_scale, down_scale = layer_experts(True)
    scales = (gate_up_scale, down_scale)
    cpu = [t.cpu() for t in (gate_up, down, gate_up_scale, down_scale)]
    exact_weights = (cpu[0].float() * cpu[2][..., None], cpu[1].float() * cpu[3][..., None])
    for tokens in CHECKED_TOKENS:
        x, _, weights, ids = routed_batch(tokens)
        args = (x.cpu(), *cpu[:2], weights.cpu(), ids.cpu(), *cpu[2:])
        reference = experts_reference(*args, quantize_activations=True).float()
        exact = experts_reference(x.cpu().float(), *exact_weights, weights.cpu().float(), ids.cpu()).float()
        for promoted in (True, False):
            moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32 = promoted
            ours = grouped_experts(x, gate_up, down, weights, ids, *scales, True).float().cpu()
            from_reference = ((ours - reference).norm() / reference.norm()).item()
            print(
                f"{tokens:6d} tokens, {'promoted' if promoted else 'imprecise'}: {from_reference:.2e} from the "
                f"reference; largest token {largest_token_error(ours, exact):.4f} from float32 (the reference's "
                f"{largest_token_error(reference, exact):.4f})",
                flush=True,
            )
    batches = {tokens: routed_batch(tokens) for tokens in TIMED_TOKENS}
    variants = (("promoted", True, True), ("imprecise", False, True), ("promoted again", True, True))
    for label, promoted, quantized in (*variants, ("bf16 activations", True, False)):
        moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32 = promoted
        times = [
            time_us(partial(grouped_experts, x, gate_up, down, weights, ids, *scales, quantized))
            for x, _, weights, ids in batches.values()
        ]
        print(
            f"{label:15s}: " + ", ".join(f"{t:8.1f} us at {n}" for n, t in zip(TIMED_TOKENS, times)),
            flush=True,
        )
    # the layer's small kernels alone: the sort by expert, the input's quantization, the pairs' sum
    for tokens, (x, _, weights, ids) in batches.items():
        block_m = moe_tiles.row_tile(ids.numel(), 128, quantized_activations=True)
        pairs = torch.randn(ids.numel(), x.shape[1], device=x.device)
        align = time_us(partial(align_by_expert, ids, 128, block_m))
        quantize = time_us(partial(quantize_tokens, x))
        summed = time_us(partial(sum_pairs, pairs, ids, 128, x.dtype))
        print(
            f"{tokens:6d} tokens: align {align:7.1f} us, quantize {quantize:6.1f} us, sum {summed:6.1f} us",
            flush=True,
        )


if __name__ == "__main__":
    main()
