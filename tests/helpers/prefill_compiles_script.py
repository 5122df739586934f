"""The Triton kernels a fresh engine compiles in prefill steps after its start-up, in a process of its own
(a kernel one engine compiled stays compiled for the next in a process):
`python -m tests.helpers.prefill_compiles_script MODEL SETTINGS_JSON STEP_TOKENS_JSON`. Prints one JSON line:
`{"at_start_up": N, "compiled": [names]}` (`at_start_up` null where Triton has no compile hook)."""

from __future__ import annotations

import json
import random
import sys

from nvllm import LLM, SamplingParams
from nvllm.profiling.kernel_compiles import triton_compiles

# The longest prompt a step is made of: a step of more than 4 prompts runs outside the prefill graphs, at its
# own token count.
LONGEST_PROMPT = 200


def prompts_of(total: int, rng: random.Random) -> list[list[int]]:
    """Prompts of `total` tokens in all, none longer than `LONGEST_PROMPT`, of random tokens."""
    full, rest = divmod(total, LONGEST_PROMPT)
    lengths = [LONGEST_PROMPT] * full + ([rest] if rest else [])
    return [[rng.randrange(1000, 100_000) for _ in range(length)] for length in lengths]


def main(model: str, settings: dict, step_tokens: list[int]) -> None:
    params = SamplingParams(max_tokens=1)  # a prefill step each, no decode step
    rng = random.Random(0)
    with triton_compiles() as at_start_up:
        llm = LLM(model, **settings)
    with llm, triton_compiles() as compiled:
        for tokens in step_tokens:  # one step each: the step's budget holds all its prompts
            llm.generate(prompts_of(tokens, rng), params, use_tqdm=False)
    count = None if at_start_up is None else len(at_start_up)
    print(json.dumps({"at_start_up": count, "compiled": compiled}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]))
