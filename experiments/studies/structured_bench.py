"""nano-vLLM's bench requests with every row under a JSON schema, beside the same requests free: output tok/s
of each (the grammar ends a constrained output where it accepts, so its token count is reported too), and
the schema's compile time. On the GPU (compiled, the defaults):

    python -m experiments.studies.structured_bench [--model qwen3-0.6b]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from experiments.harness.config import WorkloadConfig
from experiments.harness.workload import make_requests
from nvllm import LLM, SamplingParams, StructuredOutputsParams
from nvllm.sampling.grammar_compiler import GrammarCompiler

# an object of free text and numbers: room for hundreds of tokens, as the bench's outputs have
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}},
        "notes": {"type": "string"},
    },
    "required": ["title", "tags", "scores", "notes"],
}
BENCH = WorkloadConfig(num_seqs=256, input_len=1024, min_input_len=100, output_len=1024, min_output_len=100)


def timed(llm: LLM, prompts, params: list[SamplingParams]) -> tuple[float, int]:
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return seconds, sum(len(c.token_ids) for out in outputs for c in out.outputs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen3-0.6b")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num-seqs", type=int, default=BENCH.num_seqs, help="fewer for a smoke run")
    arguments = parser.parse_args()
    with LLM(arguments.model) as llm:
        compiler = GrammarCompiler(llm.tokenizer, llm.config.model.vocab_size, llm.config.model.eos_token_ids)
        start = time.perf_counter()
        compiler.compile(StructuredOutputsParams(json=SCHEMA))
        print(f"schema compile: {1e3 * (time.perf_counter() - start):.1f} ms (first, uncached)")
        workload = dataclasses.replace(BENCH, num_seqs=arguments.num_seqs)
        prompts, free = make_requests(workload, llm.config.model.vocab_size)
        constrained = [dataclasses.replace(p, structured_outputs={"json": SCHEMA}) for p in free]
        llm.generate(prompts[:16], free[:16], use_tqdm=False)  # warm-up
        llm.generate(prompts[:16], constrained[:16], use_tqdm=False)
        for repeat in range(arguments.repeats):
            for name, params in (("free", free), ("json", constrained)):
                seconds, tokens = timed(llm, prompts, params)
                rate = tokens / seconds
                print(f"repeat {repeat} {name}: {tokens} tokens in {seconds:.2f} s = {rate:,.0f} tok/s")


if __name__ == "__main__":
    main()
