"""Where cascade attention starts to pay: decode time per step of one prefix group, cascade against plain,
over a grid of prefix lengths x group sizes, in one engine (CUDA graphs of both kinds recorded at start-up).

    python -m experiments.studies.cascade_crossover [--prefix-lens 256 512 ...] [--group-sizes 2 4 ...]

Prints one row per cell (saved KV tokens per step = prefix_len * (group_size - 1), ms per step both ways,
the speed-up) and the smallest saved-token count above which cascade was faster in every cell: the value for
`nvllm.attention.cascade.CASCADE_MIN_SAVED_TOKENS` (the `attention.cascade=auto` rule) on this machine and
model.
"""

from __future__ import annotations

import argparse
import random

from nvllm import LLM, SamplingParams

SUFFIX_LEN = 16
MIN_SPEEDUP = 1.02  # cascade must beat plain by more than the run-to-run noise of one call


def decode_ms_per_step(llm: LLM, prompts: list[list[int]], output_len: int, mode: str) -> float:
    """Decode milliseconds per step of the group, with the backend's cascade mode set to `mode` (the graphs
    of both kinds exist: the engine started with cascade on)."""
    llm.set_cascade(mode)
    before = llm.stats()
    llm.generate(
        prompts, SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True), use_tqdm=False
    )
    after = llm.stats()
    steps = (after["decode_tokens"] - before["decode_tokens"]) / len(prompts)
    return 1000 * (after["decode_s"] - before["decode_s"]) / steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="checkpoint dir or preset (default: Qwen3-0.6B shape)")
    parser.add_argument("--prefix-lens", type=int, nargs="+", default=[256, 512, 1024, 2048, 3072])
    parser.add_argument("--group-sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64, 128, 256])
    parser.add_argument("--output-len", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2, help="alternating on/off measurements per cell")
    args = parser.parse_args()
    longest = max(args.prefix_lens) + SUFFIX_LEN + args.output_len
    llm = LLM(
        args.model,
        attention__cascade="on",
        max_num_seqs=max(args.group_sizes),
        max_model_len=longest + 256,
    )
    rng = random.Random(0)
    rows = []
    for prefix_len in args.prefix_lens:
        for group_size in args.group_sizes:
            prefix = [rng.randrange(10_000) for _ in range(prefix_len)]
            prompts = [prefix + [rng.randrange(10_000) for _ in range(SUFFIX_LEN)] for _ in range(group_size)]
            llm.generate(prompts[:1], SamplingParams(max_tokens=1), use_tqdm=False)  # the prefix, cached
            times = {"on": [], "off": []}
            for _ in range(args.repeats):
                for mode in ("off", "on"):
                    times[mode].append(decode_ms_per_step(llm, prompts, args.output_len, mode))
            plain, cascade = min(times["off"]), min(times["on"])
            rows.append((prefix_len, group_size, prefix_len * (group_size - 1), plain, cascade))
            print(
                f"prefix {prefix_len:5d} x group {group_size:4d}: saved {rows[-1][2]:8d} tokens/step, "
                f"plain {plain:7.3f} ms, cascade {cascade:7.3f} ms, speed-up {plain / cascade:5.2f}x",
                flush=True,
            )
    llm.shutdown()
    losing = [saved for _, _, saved, plain, cascade in rows if plain / cascade < MIN_SPEEDUP]
    threshold = min((saved for _, _, saved, _, _ in rows if saved > max(losing, default=-1)), default=None)
    print(f"cells where cascade lost or tied (saved tokens): {sorted(losing)}")
    print(f"suggested CASCADE_MIN_SAVED_TOKENS: {threshold}")


if __name__ == "__main__":
    main()
