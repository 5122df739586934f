"""The FP8 KV cache against the model's own dtype's cache, both against float32: the same random weights and
prompts, greedy, one engine each, on prompts of `--prompt-len` tokens and on long ones of `--long-prompt-len`
(where attention reads more rounded keys and values). The float32 engine (eager, the torch attention
backend, a float32 cache) is the reference that tells fp8's error from the one the model's dtype makes
anyway, as in `experiments.studies.fp8_accuracy` (the FP8-weights report), whose measures and table this
reuses. On the CPU the model's dtype is float32 unless `--dtype bfloat16` asks for bf16.

`python -m experiments.studies.fp8_kv_accuracy [--model qwen3-0.6b] [--prompts 32] [--prompt-len 128]
[--long-prompt-len 4096] [--new 256]` (on the CPU: `--model tiny --prompts 4 --long-prompt-len 512 --new 32
--vocab 4096`)."""

from __future__ import annotations

import argparse
import random

import torch

from experiments.studies.fp8_accuracy import TABLE_HEADER, agreement, greedy_outputs, table_row

# the engines compared: the reference, the model's dtype with its own cache, and with an fp8 cache
ENGINES = {
    "float32": dict(model__dtype="float32", attention__backend="torch", enforce_eager=True),
    "dtype": {},
    "fp8 KV": dict(kv_cache_dtype="fp8"),
}
PAIRS = (("float32", "dtype"), ("float32", "fp8 KV"), ("dtype", "fp8 KV"))  # (reference, other)


def compare(model: str, prompts: list[list[int]], new_tokens: int, common: dict) -> list[str]:
    """The table of PAIRS over `prompts`, under a line that names the prompts; `common`: settings of the
    engines in the model's dtype."""
    outputs, dtype = {}, ""
    for name, settings in ENGINES.items():
        settings = {**common, **settings} if name == "float32" else {**settings, **common}
        outputs[name], _, engine_dtype = greedy_outputs(model, settings, prompts, new_tokens)
        dtype = engine_dtype if name == "dtype" else dtype
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # this engine's memory, for the next one's KV cache
    names = {"float32": "float32", "dtype": f"{dtype} cache", "fp8 KV": f"{dtype} with an fp8 cache"}
    lines = [f"{len(prompts)} prompts of {len(prompts[0])} tokens, {new_tokens} greedy tokens each", ""]
    lines += TABLE_HEADER
    for reference, other in PAIRS:
        pair = [agreement(a, b) for a, b in zip(outputs[reference], outputs[other], strict=True)]
        lines.append(table_row(f"{names[other]} against {names[reference]}", pair))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen3-0.6b", help="a preset or a checkpoint directory")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--long-prompt-len", type=int, default=4096)
    parser.add_argument("--new", type=int, default=256, help="greedy tokens per prompt")
    parser.add_argument("--vocab", type=int, default=151936, help="prompt token ids are drawn below this")
    parser.add_argument("--dtype", default="auto", help="the model's dtype (auto: bf16 on CUDA, fp32 on CPU)")
    args = parser.parse_args()
    rng = random.Random(0)
    common = dict(max_model_len=args.long_prompt_len + args.new, model__dtype=args.dtype)
    lines = [
        f"{args.model}: the KV cache in fp8 (e4m3, unit scale) against the model's dtype and float32",
        "",
    ]
    for length in (args.prompt_len, args.long_prompt_len):
        prompts = [[rng.randrange(args.vocab) for _ in range(length)] for _ in range(args.prompts)]
        lines += [*compare(args.model, prompts, args.new, common), ""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
