"""FP8 weights against the model's own dtype, both against float32: the same random weights and prompts,
greedy, one engine each. The float32 engine (eager, the torch attention backend) is the reference that
tells fp8's error from the one the model's dtype makes anyway: random models put many tokens at near-ties,
so even bf16 parts from float32 early.

For each prompt and pair: how many tokens the two greedy generations share before they part, and where they
part, how far apart the reference put the two tokens (the log-probability of its token minus that of the
other's: a near-tie is a small gap). Over the shared tokens: how far the other's log-probability of each
token is from the reference's. Also the weights' memory of each engine.

`--fp8-activations` adds a fourth engine for a mixture-of-experts model: fp8 weights whose experts multiply
fp8 activations (`model.fp8_activations`), against float32 and against fp8 weights alone.

`python -m experiments.studies.fp8_accuracy [--model qwen3-0.6b] [--prompts 32] [--prompt-len 128] [--new
256] [--dtype bfloat16] [--fp8-activations]`
(on the CPU: `--model tiny`; `--dtype` sets the model's dtype where `auto` would not give the one to compare,
as on the CPU, where it is float32)."""

from __future__ import annotations

import argparse
import random
import statistics
from dataclasses import dataclass

import torch

from nvllm import LLM, SamplingParams
from nvllm.outputs import CompletionOutput

TOP_LOGPROBS = 5


@dataclass
class Agreement:
    """Two greedy generations of one prompt: tokens shared before they part (all of them when they never
    do), the reference's log-probability gap between its token and the other's where they part (None where
    they never part, or the other's token is not in the reference's top log-probabilities), and the mean
    absolute difference of the two log-probabilities of the shared tokens (None where they share none)."""

    shared: int
    parted: bool
    gap_at_parting: float | None
    mean_logprob_difference: float | None


def agreement(reference: CompletionOutput, other: CompletionOutput) -> Agreement:
    pairs = list(zip(reference.token_ids, other.token_ids, strict=True))
    shared = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
    differences = [
        abs(reference.logprobs[i][token] - other.logprobs[i][token])
        for i, token in enumerate(reference.token_ids[:shared])
    ]
    gap = None
    if shared < len(pairs):
        at_parting = reference.logprobs[shared]
        theirs = other.token_ids[shared]
        if theirs in at_parting:
            gap = at_parting[reference.token_ids[shared]] - at_parting[theirs]
    mean = statistics.fmean(differences) if differences else None
    return Agreement(shared, shared < len(pairs), gap, mean)


# the engines compared: the reference, the model's dtype, and fp8 weights
ENGINES = {
    "float32": dict(model__dtype="float32", attention__backend="torch", enforce_eager=True),
    "dtype": {},
    "fp8": dict(model__quantization="fp8"),
}
PAIRS = (("float32", "dtype"), ("float32", "fp8"), ("dtype", "fp8"))  # (reference, other)
# with --fp8-activations
FP8_ACTIVATIONS = {"fp8 activations": dict(model__quantization="fp8", model__fp8_activations=True)}
FP8_ACTIVATION_PAIRS = (("float32", "fp8 activations"), ("fp8", "fp8 activations"))


def engines(dtype: str | None, fp8_activations: bool = False) -> dict[str, dict]:
    """`ENGINES` (and `FP8_ACTIVATIONS`), the model's dtype and fp8's activations `dtype` where given."""
    chosen = {**ENGINES, **(FP8_ACTIVATIONS if fp8_activations else {})}
    if dtype is None:
        return chosen
    return {name: {"model__dtype": dtype, **settings} for name, settings in chosen.items()}


def greedy_outputs(model: str, settings: dict, prompts: list[list[int]], new_tokens: int):
    """The greedy completions of `prompts` by an engine of `settings`, its weights' memory in GiB and its
    dtype's name."""
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True, logprobs=TOP_LOGPROBS)
    with LLM(model, **settings) as llm:
        weights = llm.model_runner.weight_bytes
        outputs = [request.outputs[0] for request in llm.generate(prompts, params, use_tqdm=False)]
        dtype = str(llm.model_runner.dtype).removeprefix("torch.")
    return outputs, weights / 2**30, dtype


def report(
    model: str,
    agreements: dict[tuple, list[Agreement]],
    weights_gib: dict[str, float],
    dtype: str,
    new_tokens: int,
) -> str:
    """One table row per (reference, other) pair of `agreements`."""
    first = next(iter(agreements.values()))
    names = {"float32": "float32", "dtype": dtype, "fp8": "fp8", "fp8 activations": "fp8 on fp8 activations"}
    lines = [
        f"{model}, {len(first)} prompts, {new_tokens} greedy tokens each; weights: "
        + ", ".join(f"{names[name]} {gib:.2f} GiB" for name, gib in weights_gib.items()),
        "",
        *TABLE_HEADER,
    ]
    for (reference, other), pair in agreements.items():
        lines.append(table_row(f"{names[other]} against {names[reference]}", pair))
    return "\n".join(lines)


TABLE_HEADER = (
    "| other against reference | never part | shared tokens, median (min) | mean abs log-prob difference of "
    "the shared tokens (prompts that share any) "
    f"| gap where they part, nats: median (max), partings in the reference's top {TOP_LOGPROBS} |",
    "| --- | --- | --- | --- | --- |",
)


def table_row(label: str, pair: list[Agreement]) -> str:
    """One pair's agreements over the prompts as a row under TABLE_HEADER."""
    gaps = [a.gap_at_parting for a in pair if a.gap_at_parting is not None]
    parted = sum(a.parted for a in pair)
    shared = [a.shared for a in pair]
    gap = f"{statistics.median(gaps):.3f} ({max(gaps):.3f}), {len(gaps)} of {parted}" if gaps else "-"
    # a prompt whose generations part at their first token has no shared token to compare: left out, not 0
    means = [a.mean_logprob_difference for a in pair if a.mean_logprob_difference is not None]
    mean = f"{statistics.fmean(means):.4f} ({len(means)})" if means else "-"
    return (
        f"| {label} | {len(pair) - parted} of {len(pair)} | {statistics.median(shared)} ({min(shared)}) "
        f"| {mean} | {gap} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen3-0.6b", help="a preset or a checkpoint directory")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new", type=int, default=256, help="greedy tokens per prompt")
    parser.add_argument("--vocab", type=int, default=151936, help="prompt token ids are drawn below this")
    parser.add_argument("--dtype", help="the model's dtype (default: auto)")
    parser.add_argument(
        "--fp8-activations", action="store_true", help="a MoE's experts on fp8 activations too"
    )
    args = parser.parse_args()
    rng = random.Random(0)
    prompts = [[rng.randrange(args.vocab) for _ in range(args.prompt_len)] for _ in range(args.prompts)]
    outputs, weights, dtypes = {}, {}, {}
    for name, settings in engines(args.dtype, args.fp8_activations).items():
        outputs[name], weights[name], dtypes[name] = greedy_outputs(args.model, settings, prompts, args.new)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # this engine's memory, for the next one's KV cache
    agreements = {
        (reference, other): [agreement(a, b) for a, b in zip(outputs[reference], outputs[other], strict=True)]
        for reference, other in PAIRS + (FP8_ACTIVATION_PAIRS if args.fp8_activations else ())
    }
    print(report(args.model, agreements, weights, dtypes["dtype"], args.new))


if __name__ == "__main__":
    main()
