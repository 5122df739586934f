"""Which experts each layer's router chose, in the engine and in transformers, along the engine's greedy path
on a mixture-of-experts checkpoint: where the path parts from transformers' fp32 best token, whether the
engine's routers chose as transformers' own do in the same dtype, or as its fp32 does, or neither. What tells
a router near-tie (a choice that rounding flips, in transformers' lower precision too) from a defect.

The engine runs eagerly (forward hooks on its routers record their logits; CUDA graphs would replay without
them), tensor-parallel size 1; transformers runs on the same weights rounded to the engine's dtype.

    python -m experiments.studies.moe_router_parity CHECKPOINT [--prompt-len 7] [--max-tokens 24]
        [--dtype bfloat16] [--device cuda]
"""

from __future__ import annotations

import argparse
import random
from contextlib import contextmanager

import torch

from experiments.harness.parity import fp32_gap
from nvllm import LLM, SamplingParams
from nvllm.layers.fused_moe import FusedMoE
from nvllm.ops.moe_routing import route


@contextmanager
def recorded_outputs(modules: list[torch.nn.Module]):
    """Each module's forward outputs while the block runs, in call order: one list per module."""
    outputs: list[list] = [[] for _ in modules]
    hooks = [
        module.register_forward_hook(lambda _module, _args, out, kept=kept: kept.append(out))
        for module, kept in zip(modules, outputs, strict=True)
    ]
    try:
        yield outputs
    finally:
        for hook in hooks:
            hook.remove()


def engine_choices(llm: LLM, tokens: list[int]) -> list[torch.Tensor]:
    """Per sparse layer, the experts its router chose at each position of `tokens` (`[positions, k]`, in
    ascending order), from one prefill of them all."""
    layers = [module for module in llm.model_runner.model.modules() if isinstance(module, FusedMoE)]
    llm.reset_prefix_cache()  # every position computed, none read from the cache
    with recorded_outputs([layer.gate for layer in layers]) as logits:
        llm.generate([tokens], SamplingParams(max_tokens=1), use_tqdm=False)
    choices = []
    for layer, calls in zip(layers, logits, strict=True):
        prefill = next(call for call in calls if call.shape[0] >= len(tokens))  # not a warm-up's
        _, ids = route(prefill[: len(tokens)], layer.top_k, layer.renormalize)
        choices.append(ids.sort(dim=-1).values.cpu())
    return choices


def transformers_choices(
    model: torch.nn.Module, tokens: list[int]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per sparse layer of transformers' model, its routers' choices at each position (ascending), and the
    model's logits `[positions, vocab]` in fp32."""
    routers = [module.gate for module in model.modules() if type(module).__name__.endswith("SparseMoeBlock")]
    device = next(model.parameters()).device
    with torch.no_grad(), recorded_outputs(routers) as outputs:
        logits = model(torch.tensor([tokens], device=device)).logits[0].float().cpu()
    return [calls[0][2].sort(dim=-1).values.cpu() for calls in outputs], logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument(
        "--prompt-len", type=int, default=7, help="random prompt tokens (seeded by the length)"
    )
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    prompt = [random.Random(args.prompt_len).randrange(150_000) for _ in range(args.prompt_len)]
    greedy = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    max_model_len = args.prompt_len + args.max_tokens + 1
    with LLM(args.checkpoint, dtype=args.dtype, device=args.device, enforce_eager=True,
             max_model_len=max_model_len) as llm:  # fmt: skip
        generated = llm.generate([prompt], greedy, use_tqdm=False)[0].outputs[0].token_ids
        path = prompt + generated
        ours = engine_choices(llm, path)
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).to(args.device).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(dtype))  # the rounding the engine's weights went through
    fp32_choices, fp32_logits = transformers_choices(model, path)
    low_choices, _ = transformers_choices(model.to(dtype), path)
    differs = [sum(int((a != b).any(-1).sum()) for a, b in zip(ours, other, strict=True))
               for other in (fp32_choices, low_choices)]  # fmt: skip
    positions = len(path) * len(ours)
    print(
        f"(position, layer) choices of {positions}: the engine's differ from transformers' fp32 at "
        f"{differs[0]}, from transformers' {args.dtype} at {differs[1]}"
    )
    for step, token in enumerate(generated):
        position = len(prompt) - 1 + step
        best = int(fp32_logits[position].argmax())
        if token == best:
            continue
        gap = fp32_gap(fp32_logits[position], token, best)
        print(f"token {step}: the engine's {token}, fp32's best {best}, {gap:.3f} apart in fp32")
        for layer, (mine, exact, low) in enumerate(zip(ours, fp32_choices, low_choices, strict=True)):
            if not (
                torch.equal(mine[position], exact[position]) and torch.equal(mine[position], low[position])
            ):
                print(f"  sparse layer {layer}: engine {mine[position].tolist()}, transformers fp32 "
                      f"{exact[position].tolist()}, {args.dtype} {low[position].tolist()}")  # fmt: skip


if __name__ == "__main__":
    main()
