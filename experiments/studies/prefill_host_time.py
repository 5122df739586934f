"""Where a lone prompt's prefill spends its host time when no CUDA graph holds it (longer than
`compile.max_prefill_graph_tokens`): each prompt length's prefill alone (`max_tokens=1`, best of a few)
with the model's regions checking dynamo's guards as they do, and with the checks skipped; then the Python
functions that took the host time of one such prefill (cProfile, by own time), and on CUDA its kernels
(a torch.profiler trace, summed by kernel with the device's idle time before each).

    python -m experiments.studies.prefill_host_time [--model qwen3-0.6b] [--lengths 600 1000]
        [--max-prefill-graph-tokens 512] [--top 25] [--no-pdl]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import threading
import time
from pathlib import Path

import torch

from experiments.studies.trace_kernels import summary as kernel_summary
from nvllm import LLM, SamplingParams
from nvllm.runner.compiled_model import CompiledModel

REPEATS = 5


def best_prefill_ms(llm: LLM, length: int, rng: random.Random) -> float:
    """The fastest of `REPEATS` prefills of fresh random prompts of `length` tokens (no prefix-cache hit)."""
    params = SamplingParams(max_tokens=1)
    best = float("inf")
    for _ in range(REPEATS):
        prompt = [rng.randrange(1000, 100_000) for _ in range(length)]
        start = time.perf_counter()
        llm.generate([prompt], params, use_tqdm=False)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen3-0.6b")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 600, 1000, 2000])
    parser.add_argument("--max-prefill-graph-tokens", type=int, default=512)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-pdl", action="store_true", help="nvllm's Triton kernels launched without PDL")
    args = parser.parse_args()
    if args.no_pdl:
        from nvllm.ops import pdl

        pdl._supported = lambda device_index: False
    llm = LLM(args.model, compile__max_prefill_graph_tokens=args.max_prefill_graph_tokens)
    rng = random.Random(0)
    for length in args.lengths:
        best_prefill_ms(llm, length, rng)  # the first of each length may compile
    checked = {length: best_prefill_ms(llm, length, rng) for length in args.lengths}
    call = CompiledModel.__call__
    CompiledModel.__call__ = lambda self, *a, check_guards=True: call(self, *a, check_guards=False)
    unchecked = {length: best_prefill_ms(llm, length, rng) for length in args.lengths}
    CompiledModel.__call__ = call
    pdl_state = "off" if args.no_pdl else "where the GPU has it"
    print(f"{args.model}, prefill graphs up to {args.max_prefill_graph_tokens} tokens, PDL {pdl_state}; ms:")
    for length in args.lengths:
        times = f"{checked[length]:7.2f} guards checked, {unchecked[length]:7.2f} skipped"
        print(f"  {length:6d} tokens: {times}")
    longest = max(args.lengths)
    profile = cProfile.Profile()
    prompt = [rng.randrange(1000, 100_000) for _ in range(longest)]
    profile.runcall(llm.generate, [prompt], SamplingParams(max_tokens=1), use_tqdm=False)
    print(f"one {longest}-token prefill, by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    print("threads:", ", ".join(thread.name for thread in threading.enumerate()))
    if torch.cuda.is_available():
        prompt = [rng.randrange(1000, 100_000) for _ in range(longest)]
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as trace:
            llm.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "trace.json"
            trace.export_chrome_trace(str(path))
            print(f"one {longest}-token prefill's kernels:\n{kernel_summary(path, args.top)}")
    llm.shutdown()


if __name__ == "__main__":
    main()
