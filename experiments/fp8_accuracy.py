"""FP8 weights against the model's own dtype: the same random weights and prompts, greedy, one engine each.

For each prompt: how many tokens the two greedy generations share before they part, and where they part, how
far apart the reference put the two tokens (the log-probability of its token minus that of fp8's: a near-tie
is a small gap). Over the shared tokens: how far fp8's log-probability of each token is from the
reference's. Also the weights' memory of each engine.

`python -m experiments.fp8_accuracy [--model qwen3-0.6b] [--prompts 32] [--prompt-len 128] [--new 256]`
(on the CPU: `--model tiny`)."""

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
    absolute difference of the two log-probabilities of the shared tokens."""

    shared: int
    parted: bool
    gap_at_parting: float | None
    mean_logprob_difference: float


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
    mean = statistics.fmean(differences) if differences else 0.0
    return Agreement(shared, shared < len(pairs), gap, mean)


def greedy_outputs(model: str, quantization: str, prompts: list[list[int]], new_tokens: int):
    """The greedy completions of `prompts` and the engine's weights' memory in GiB."""
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True, logprobs=TOP_LOGPROBS)
    with LLM(model, model__quantization=quantization) as llm:
        weights = sum(t.numel() * t.element_size() for t in llm.model_runner.model.state_dict().values())
        outputs = [request.outputs[0] for request in llm.generate(prompts, params, use_tqdm=False)]
    return outputs, weights / 2**30


def report(model: str, agreements: list[Agreement], weights_gib: dict[str, float], new_tokens: int) -> str:
    gaps = [a.gap_at_parting for a in agreements if a.gap_at_parting is not None]
    parted = sum(a.parted for a in agreements)
    lines = [
        f"{model}, {len(agreements)} prompts, {new_tokens} greedy tokens each: fp8 against the model's dtype",
        f"- weights: {weights_gib['none']:.2f} GiB, fp8 {weights_gib['fp8']:.2f} GiB",
        f"- prompts whose generations never part: {len(agreements) - parted} of {len(agreements)}",
        f"- tokens shared before parting: median {statistics.median(a.shared for a in agreements)}, "
        f"min {min(a.shared for a in agreements)}",
        f"- mean |log-probability difference| over the shared tokens: "
        f"{statistics.fmean(a.mean_logprob_difference for a in agreements):.4f}",
    ]
    if gaps:
        lines.append(
            f"- where they part, the reference's gap between the two tokens: median "
            f"{statistics.median(gaps):.3f}, max {max(gaps):.3f} nats ({len(gaps)} of {parted} partings "
            f"in its top {TOP_LOGPROBS})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen3-0.6b", help="a preset or a checkpoint directory")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new", type=int, default=256, help="greedy tokens per prompt")
    parser.add_argument("--vocab", type=int, default=151936, help="prompt token ids are drawn below this")
    args = parser.parse_args()
    rng = random.Random(0)
    prompts = [[rng.randrange(args.vocab) for _ in range(args.prompt_len)] for _ in range(args.prompts)]
    outputs, weights = {}, {}
    for quantization in ("none", "fp8"):
        outputs[quantization], weights[quantization] = greedy_outputs(
            args.model, quantization, prompts, args.new
        )
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the first engine's memory, for the second's KV cache
    agreements = [agreement(a, b) for a, b in zip(outputs["none"], outputs["fp8"], strict=True)]
    print(report(args.model, agreements, weights, args.new))


if __name__ == "__main__":
    main()
