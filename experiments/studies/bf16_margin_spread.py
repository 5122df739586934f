"""How far bf16 rounding can move a token's margin at the positions where the engine's greedy path parts from
transformers' fp32 best token, drawn many times: transformers in bf16 on the same path, unmoved and with the
embedding's output moved by at most one bf16 rounding step (`experiments.harness.parity.nudged_embeddings`):
inputs no bf16 computation can tell from the real ones. A position whose samples spread past the engine's
fp32 gap is one where bf16 alone parts paths; one whose samples all stay below it points at the engine. The
GPU parity check (tests/helpers/gpu_parity.py) judges a parting by these samples' median.

    python -m experiments.studies.bf16_margin_spread CHECKPOINT [--samples 16] [--max-tokens 24]
        [--prompt-lens 7,60,300] [--device cuda]
"""

from __future__ import annotations

import argparse
import random

import torch

from experiments.harness.parity import fp32_gap, margin_noise, nudged_samples
from nvllm import LLM, SamplingParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--prompt-lens", default="7,60,300")
    parser.add_argument("--device", default="cuda")
    arguments = parser.parse_args()
    from transformers import AutoModelForCausalLM

    prompts = [
        [random.Random(n).randrange(150_000) for _ in range(n)]
        for n in map(int, arguments.prompt_lens.split(","))
    ]
    greedy = SamplingParams(temperature=0, max_tokens=arguments.max_tokens, ignore_eos=True)
    device = arguments.device
    engine_args = {"gpu_memory_utilization": 0.3} if device == "cuda" else {"device": device}
    with LLM(arguments.checkpoint, max_model_len=512, **engine_args) as llm:
        generations = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy, use_tqdm=False)]

    model = AutoModelForCausalLM.from_pretrained(arguments.checkpoint, dtype=torch.float32).eval().to(device)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16))  # the rounding the engine's weights went through

        def logits(tokens: list[int]) -> torch.Tensor:
            return model(torch.tensor([tokens], device=device)).logits[0].float().cpu()

        paths = [prompt + ours for prompt, ours in zip(prompts, generations, strict=True)]
        fp32_paths = [logits(path) for path in paths]
        model.to(torch.bfloat16)
        # per sample, per path: logits [positions, vocab]
        samples = nudged_samples(model, arguments.samples, lambda: [logits(path) for path in paths])

    print(f"{arguments.checkpoint}: {arguments.samples} bf16 samples (sample 0 unmoved)")
    print("prompt  step  engine  fp32 best  fp32 gap  bf16 shift: unmoved  median  max  samples past the gap")
    partings = 0
    for index, (prompt, ours) in enumerate(zip(prompts, generations, strict=True)):
        start = len(prompt) - 1
        for step, token in enumerate(ours):
            fp32 = fp32_paths[index][start + step]
            best = int(fp32.argmax())
            if token == best:
                continue
            partings += 1
            gap = fp32_gap(fp32, token, best)
            shifts = torch.tensor([margin_noise(s[index][start + step], fp32) for s in samples])
            past = int((shifts >= gap).sum())
            print(
                f"{len(prompt):6d}  {step:4d}  {token:6d}  {best:9d}  {gap:8.3f}  {shifts[0]:18.3f}  "
                f"{shifts.median():6.3f}  {shifts.max():5.3f}  {past}/{len(shifts)}"
            )
    print(f"{partings} partings over {sum(map(len, generations))} tokens")


if __name__ == "__main__":
    main()
