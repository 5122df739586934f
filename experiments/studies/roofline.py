"""The fastest a workload can run on a device, from the model's shapes alone: an ideal engine that runs
every prompt token at the device's peak FLOP/s and every decode step at the larger of its bytes over the
peak bandwidth and its FLOPs over the peak FLOP/s. The work is counted as `nvllm.profiling.utilization`
counts it
(the matmuls and attention; the weights read once per decode step, each sequence's KV once per step), for
the experiment's own requests (`experiments.harness.workload.make_requests`), all there from the start: every
prompt is prefilled, then the sequences decode together until each reaches its output length. Prints the
bound in output tok/s at the datasheet peaks and at shares of them that kernels reach.

    python -m experiments.studies.roofline +experiment=bench model=qwen3-8b
    python -m experiments.studies.roofline +experiment=latency model=qwen3-0.6b --device "H200 NVL"

Arguments other than --device are Hydra overrides, as for `python -m nvllm.run`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
from omegaconf import OmegaConf

from experiments.harness.config import workload_config
from experiments.harness.workload import make_requests
from nvllm.config import ModelConfig, to_dataclass
from nvllm.profiling.utilization import DevicePeak, ModelWork, decode_keys, peak_of_name, prefill_keys
from nvllm.run import compose_config
from nvllm.runner.dtypes import DTYPES, kv_cache_dtype, resolved_dtype

# (bandwidth, FLOP/s) shares: the peaks, and about what the best kernels measured on the H200 reach
# (decode attention and small-batch matmuls streaming; large bf16 matmuls), per
# experiments/results/2026-12-01-h200-triton-decode-attention.md
SHARES = ((1.0, 1.0), (0.875, 0.7))


@dataclass
class Bound:
    prefill_s: float
    decode_s: float
    output_tokens: int

    @property
    def output_tok_per_s(self) -> float:
        return self.output_tokens / (self.prefill_s + self.decode_s)


def roofline(
    work: ModelWork, lengths: list[tuple[int, int]], bytes_per_s: float, flops_per_s: float
) -> Bound:
    """The bound for requests of (prompt tokens, output tokens). A prompt of n tokens is prefilled in one
    pass that samples its first output token; each later token is a decode step attending to every token
    before it and itself."""
    prompts = np.array([n for n, _ in lengths], dtype=np.float64)
    outputs = np.array([o for _, o in lengths], dtype=np.int64)
    prefill_flops = work.flops(prompts.sum(), len(lengths), prefill_keys(0, prompts).sum())
    decode_s = 0.0
    for step in range(int(outputs.max()) - 1):  # decode step `step` makes output token step + 2
        live = outputs > step + 1
        rows = int(live.sum())
        keys = float(decode_keys(prompts[live] + step + 1, 1).sum())
        flops, num_bytes = work.flops(rows, rows, keys), work.bytes(1, rows, keys)
        decode_s += max(num_bytes / bytes_per_s, flops / flops_per_s)
    return Bound(float(prefill_flops / flops_per_s), decode_s, int(outputs.sum()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", default="H200", help="a device of nvllm.profiling.utilization.PEAKS (default H200)"
    )
    arguments, overrides = parser.parse_known_args()
    peak: DevicePeak | None = peak_of_name(arguments.device)
    if peak is None:
        raise SystemExit(
            f"--device {arguments.device!r}: no peak known (see nvllm.profiling.utilization.PEAKS)"
        )
    cfg = compose_config(overrides)
    model = to_dataclass(ModelConfig, OmegaConf.to_container(cfg.model, resolve=True))
    dtype = DTYPES[resolved_dtype(model.dtype, on_cuda=True)]  # the bound is a GPU's
    work = ModelWork.of(model, dtype, kv_cache_dtype(cfg.cache.dtype, dtype))
    prompts, params = make_requests(workload_config(cfg), model.vocab_size)
    lengths = [(len(prompt), p.max_tokens) for prompt, p in zip(prompts, params)]
    print(
        f"{model.name} on {peak.name}: {len(lengths)} requests, {sum(o for _, o in lengths):,} output tokens"
    )
    print(f"{'bandwidth':>10} {'FLOP/s':>7} {'prefill s':>10} {'decode s':>9} {'output tok/s':>13}")
    for bandwidth_share, flops_share in SHARES:
        bound = roofline(
            work, lengths, bandwidth_share * peak.tb_per_s * 1e12, flops_share * peak.tflops * 1e12
        )
        print(
            f"{bandwidth_share:>10.1%} {flops_share:>7.0%} {bound.prefill_s:>10.2f} {bound.decode_s:>9.2f} "
            f"{bound.output_tok_per_s:>13,.0f}"
        )


if __name__ == "__main__":
    main()
