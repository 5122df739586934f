"""The sampler's race on the GPU, the torch way against the race kernels (`nvllm.ops.race_triton`,
`compile.race_kernel`), at Qwen3's vocabulary and the batch sizes a decode step has. The torch way is what a
sampled step runs today: an `exponential_` kernel writes the `[rows, vocab]` noise, then the compiled race
(`race`, or `race_in_chunks` for a few rows) reads it with the logits. The kernels draw the noise as they
read the logits. Each time is `triton.testing.do_bench`'s median (the L2 cleared before each call), with
the bytes the logits alone take at that time beside it.

`python -m experiments.kernels.race_bench [--rows 1,8,64,256,512] [--vocab 151936]`"""

from __future__ import annotations

import argparse

import torch
import triton

from nvllm.ops import race_triton
from nvllm.sampling.sampler import Sampler, race, race_in_chunks


def times_us(num_rows: int, vocab: int, torch_race, torch_chunks) -> tuple[float, float]:
    """(the torch way, the kernels) for `num_rows` rows, in µs."""
    logits = torch.randn(num_rows, vocab, device="cuda").to(torch.bfloat16)
    inv_temperatures = torch.full((num_rows,), 1 / 0.6, device="cuda")
    noise_scales = torch.ones(num_rows, device="cuda")
    race_of_torch = torch_chunks if num_rows <= Sampler.CHUNKED_MAX_ROWS else torch_race

    def torch_way():
        noise = torch.empty(logits.shape, dtype=torch.float32, device="cuda").exponential_()
        return race_of_torch(logits, inv_temperatures, noise_scales, noise)

    def kernels():
        return race_triton.race_in_kernels(logits, inv_temperatures, noise_scales, seed=12345)

    return tuple(triton.testing.do_bench(fn, return_mode="median") * 1e3 for fn in (torch_way, kernels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8,64,256,512")
    parser.add_argument("--vocab", type=int, default=151_936)
    args = parser.parse_args()
    torch_race = torch.compile(race, fullgraph=True, dynamic=True)
    torch_chunks = torch.compile(race_in_chunks, fullgraph=True, dynamic=True)
    print("| rows | torch: noise + race, µs | kernels, µs | speed-up | kernels, GB/s of logits |")
    print("| --- | --- | --- | --- | --- |")
    for num_rows in (int(rows) for rows in args.rows.split(",")):
        torch_us, kernel_us = times_us(num_rows, args.vocab, torch_race, torch_chunks)
        gb_per_s = num_rows * args.vocab * 2 / kernel_us / 1e3
        speed_up = torch_us / kernel_us
        print(f"| {num_rows} | {torch_us:.1f} | {kernel_us:.1f} | {speed_up:.2f}× | {gb_per_s:,.0f} |")


if __name__ == "__main__":
    main()
