"""Decode rounds with structured outputs: the grammar's mask filled at every step inside a round of several
steps (each step's constrained tokens read back for the host's matchers) against rounds of one step, which
the host would otherwise need; and the free bench beside both. A tiny random model with Qwen's whole
vocabulary on the CPU, half the rows constrained by a JSON schema. Measured in the process's CPU time, not
wall time: a shared machine's other work then does not count (the engine runs one thread here):

    python -m experiments.studies.structured_rounds
"""

from __future__ import annotations

import statistics
import time

from nvllm import LLM, SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "words": {"type": "array", "items": {"type": "string"}}},
    "required": ["id", "words"],
}
NUM_ROWS, MAX_TOKENS, REPEATS = 16, 64, 5


def requests(constrained: bool) -> tuple[list[list[int]], list[SamplingParams]]:
    prompts = [[(7 * row + position) % 4000 for position in range(32)] for row in range(NUM_ROWS)]
    params = [
        SamplingParams(
            temperature=1.0,
            seed=row,
            max_tokens=MAX_TOKENS,
            ignore_eos=True,
            structured_outputs={"json": SCHEMA} if constrained and row % 2 == 0 else None,
        )
        for row in range(NUM_ROWS)
    ]
    return prompts, params


def tokens_per_second(num_decode_steps: int, constrained: bool) -> tuple[float, int]:
    """The median over REPEATS of generated tokens per CPU second, and the tokens of a call."""
    prompts, params = requests(constrained)
    with LLM("tiny", enforce_eager=True, num_decode_steps=num_decode_steps) as llm:
        llm.generate(prompts, params, use_tqdm=False)  # warm-up (and the grammar's compile)
        rates = []
        for _ in range(REPEATS):
            start = time.process_time()
            outputs = llm.generate(prompts, params, use_tqdm=False)
            elapsed = time.process_time() - start
            num_tokens = sum(len(c.token_ids) for out in outputs for c in out.outputs)
            rates.append(num_tokens / elapsed)
    return statistics.median(rates), num_tokens


def main() -> None:
    print(f"| rows | decode steps per round | tokens per call | tok per CPU s (median of {REPEATS}) |")
    print("|---|---|---|---|")
    for constrained in (False, True):
        for num_decode_steps in (16, 1):
            rate, num_tokens = tokens_per_second(num_decode_steps, constrained)
            rows = "8 JSON + 8 free" if constrained else "16 free"
            print(f"| {rows} | {num_decode_steps} | {num_tokens} | {rate:.0f} |")


if __name__ == "__main__":
    main()
