"""transformers' side of the validate experiment, on the checkpoint the engine ran: its greedy generation in
the engine's dtype, the fp32 model's logits along the engine's tokens (the near-tie oracle) and how far the
engine's dtype puts transformers' own logits from fp32's (the noise a near-tie is judged by). transformers is
imported here only: the engine never needs it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from experiments.harness.parity import fp32_gap, is_near_tie, parting, precision_noise
from nvllm.runner.dtypes import DTYPES


@dataclass
class Comparison:
    """One prompt: the engine's greedy tokens against transformers', and where they part."""

    ours: list[int]
    theirs: list[int]
    parted_at: int | None  # None: every token followed
    fp32_at_parting: torch.Tensor | None  # the fp32 model's logits where they part
    noise: float  # this prompt's: transformers in the engine's dtype against fp32, up to the parting

    @property
    def tokens_followed(self) -> int:
        return len(self.ours) if self.parted_at is None else self.parted_at

    @property
    def fp32_gap(self) -> float | None:
        """How far apart the fp32 model puts the two tokens where the generations part."""
        if self.parted_at is None:
            return None
        return fp32_gap(self.fp32_at_parting, self.ours[self.parted_at], self.theirs[self.parted_at])

    def parts_at_near_tie(self, noise: float) -> bool:
        """Whether the generations part at a near-tie of the fp32 model, within `noise`."""
        if (index := self.parted_at) is None:
            return False
        return is_near_tie(self.fp32_at_parting, self.ours[index], self.theirs[index], noise)


def load_model(checkpoint: str, dtype: torch.dtype, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).to(device).eval()


def logits_along(model: torch.nn.Module, prompt: list[int], tokens: list[int], device: str) -> torch.Tensor:
    """`[len(tokens), vocab]` fp32 logits: the model's prediction of each of `tokens` after the prompt and
    the tokens before it, in one forward pass."""
    ids = torch.tensor([prompt + tokens], device=device)
    return model(ids).logits[0, len(prompt) - 1 : -1].float()


def greedy(model: torch.nn.Module, prompt: list[int], num_tokens: int, device: str) -> torch.Tensor:
    """`[num_tokens, vocab]` fp32 logits of the model's own greedy generation, step by step through its KV
    cache as a serving engine decodes (EOS is a token like any other: the engine ignores it too)."""
    from transformers import DynamicCache

    # each forward fills the cache in place; transformers 5 names the argument `cache`, 4 `past_key_values`
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = {keyword: DynamicCache()}
    output = model(torch.tensor([prompt], device=device), use_cache=True, **cache)
    steps = []
    for step in range(num_tokens):
        steps.append(output.logits[0, -1].float())
        if step + 1 < num_tokens:
            output = model(steps[-1].argmax().view(1, 1), use_cache=True, **cache)
    return torch.stack(steps)


@torch.no_grad()
def compare_with_transformers(
    checkpoint: str, dtype: str, device: str, prompts: list[list[int]], generations: list[list[int]]
) -> list[Comparison]:
    """Each prompt's engine generation against transformers' greedy one in `dtype` on `device`."""
    fp32_model = load_model(checkpoint, torch.float32, device)
    model = fp32_model if dtype == "float32" else load_model(checkpoint, DTYPES[dtype], device)
    comparisons = []
    for prompt, ours in zip(prompts, generations, strict=True):
        fp32_logits = logits_along(fp32_model, prompt, ours, device)
        own_logits = greedy(model, prompt, len(ours), device)
        theirs = own_logits.argmax(dim=-1).tolist()
        index = parting(ours, theirs)
        # up to the parting (itself included) both ran on the same tokens: there the logits compare
        shared = len(ours) if index is None else index + 1
        noise = precision_noise(own_logits[:shared], fp32_logits[:shared])
        at_parting = None if index is None else fp32_logits[index].cpu()
        comparisons.append(Comparison(ours, theirs, index, at_parting, noise))
    return comparisons
