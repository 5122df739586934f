"""The GPU oracle of a family checkpoint: the engine (bf16, compiled, CUDA graphs, flash-attn and the Triton
kernels) against transformers' implementation in fp32 on the same bf16-rounded weights: prefill logits
within bf16's error, and every greedy token the engine picks is the fp32 model's best or within bf16 noise
of it (a near-tie, experiments/harness/parity.py). The bf16 noise a near-tie is judged by is how far
transformers' own bf16 moves a token's margin to fp32's best token (`margin_noise`), at the prompts' last
positions or at the position itself where that is larger. At the position itself it is transformers' own
bf16 run's shift or, where larger, the median over `BF16_SAMPLES` runs, that one and others on embeddings
moved by under a bf16 rounding step (`sampled_margin_noise`): in a mixture-of-experts model a router near-tie
can send one position's token to another expert in one bf16 run and not in another, so that position's
shift is spread wide, and one run is one draw of it (experiments/results/2026-12-03-h200-moe-pdl.md)."""

from __future__ import annotations

import random

import torch

from experiments.harness.parity import (
    fp32_gap,
    is_near_tie,
    margin_noise,
    nudged_samples,
    sampled_margin_noise,
)
from nvllm import LLM, SamplingParams
from tests.helpers.family_checkpoints import load_family_model
from tests.helpers.parallel_oracle import prefill_logits, relative_error

PROMPTS = [[random.Random(n).randrange(150_000) for _ in range(n)] for n in (7, 60, 300)]
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
BF16_SAMPLES = 16


def assert_follows_transformers_up_to_bf16(path, label: str) -> None:
    with LLM(str(path), max_model_len=512, gpu_memory_utilization=0.3) as llm:
        logits = prefill_logits(llm, PROMPTS)
        generations = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]

    hf = load_family_model(path).cuda()
    with torch.no_grad():
        for param in hf.parameters():
            param.copy_(param.to(torch.bfloat16))  # the rounding the engine's weights went through

        def hf_logits(model, tokens: list[int]) -> torch.Tensor:
            return model(torch.tensor([tokens], device="cuda")).logits[0].float()

        fp32_last = torch.stack([hf_logits(hf, p)[-1] for p in PROMPTS]).cpu()
        # the weights are bf16-rounded: converting them to bf16 and back loses nothing
        paths = [prompt + ours for prompt, ours in zip(PROMPTS, generations, strict=True)]
        fp32_paths = [hf_logits(hf, path).cpu() for path in paths]
        bf16 = hf.to(torch.bfloat16)
        bf16_last = torch.stack([hf_logits(bf16, p)[-1] for p in PROMPTS]).cpu()
        # per sample, per path: [positions, vocab]
        bf16_samples = nudged_samples(
            bf16, BF16_SAMPLES, lambda: [hf_logits(bf16, path).cpu() for path in paths]
        )
        hf.float()
        noise = margin_noise(bf16_last, fp32_last)  # transformers' own bf16 against its fp32
        error = relative_error(logits, fp32_last)
        assert error <= 1.5 * relative_error(bf16_last, fp32_last) + 0.01, f"{label}: {error:.4f} from fp32"

        agreed = 0
        for index, (prompt, ours) in enumerate(zip(PROMPTS, generations, strict=True)):
            start = len(prompt) - 1
            fp32 = fp32_paths[index][start:-1]
            for step, token in enumerate(ours):
                best = int(fp32[step].argmax())
                agreed += token == best
                samples = [sample[index][start + step] for sample in bf16_samples]
                step_noise = max(
                    noise, margin_noise(samples[0], fp32[step]), sampled_margin_noise(samples, fp32[step])
                )
                assert token == best or is_near_tie(fp32[step], token, best, step_noise), (
                    f"{label}, prompt of {len(prompt)}: token {step} is {token}, fp32's best {best}; their "
                    f"fp32 logits are {fp32_gap(fp32[step], token, best):.3f} apart, bf16 noise "
                    f"{step_noise:.3f}"
                )
    assert agreed >= len(PROMPTS) * GREEDY.max_tokens * 3 // 4
