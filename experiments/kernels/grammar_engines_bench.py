"""llguidance against xgrammar on the host: the time to compile a grammar (JSON schemas, regexes) for Qwen3's
tokenizer, and the per-step cost of the next token's bitmask over the model's 151,936 logits while the matcher
walks a valid output token by token. Both packages must be installed (xgrammar is not an nvllm dependency):

    python -m experiments.kernels.grammar_engines_bench
"""

from __future__ import annotations

import json
import statistics
import time

from nvllm.config import ModelConfig
from nvllm.tokenizer.tokenizer import load_tokenizer

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
    "required": ["name", "age"],
}
ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer"},
                    "price": {"type": "number"},
                },
                "required": ["sku", "quantity", "price"],
            },
        },
        "status": {"enum": ["open", "paid", "shipped"]},
    },
    "required": ["id", "items", "status"],
}
# (kind, grammar, a valid output the matcher walks)
CASES = [
    ("json", PERSON, '{"name": "Ada Lovelace", "age": 36, "tags": ["math", "engines"]}'),
    (
        "json",
        ORDER,
        '{"id": "ABC-1234", "items": [{"sku": "x-1", "quantity": 2, "price": 9.5}, '
        '{"sku": "y-22", "quantity": 1, "price": 120.0}], "status": "paid"}',
    ),
    ("regex", r"\d{3}-\d{3}-\d{4}", "415-555-0199"),
    ("regex", r"[a-z]+(\.[a-z]+)*@[a-z]+\.(com|org|net)", "grace.hopper@navy.org"),
]
VOCAB_SIZE = ModelConfig().vocab_size


def bench_llguidance(tokenizer) -> list[dict]:
    import llguidance
    import llguidance.torch

    start = time.perf_counter()
    ll_tokenizer = llguidance.LLTokenizer(
        tokenizer.backend.to_str(), n_vocab=VOCAB_SIZE, eos_token=tokenizer.token_to_id("<|im_end|>")
    )
    setup_s = time.perf_counter() - start
    rows = []
    for kind, grammar, output in CASES:
        start = time.perf_counter()
        if kind == "json":
            text = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(grammar))
        else:
            text = llguidance.LLMatcher.grammar_from_regex(grammar)
        matcher = llguidance.LLMatcher(ll_tokenizer, text)
        matcher.compute_bitmask()  # the first mask builds the lexer lazily: counted as compile
        compile_s = time.perf_counter() - start
        matcher = llguidance.LLMatcher(ll_tokenizer, text)
        bitmask = llguidance.torch.allocate_token_bitmask(1, VOCAB_SIZE)
        step_s = []
        for token in tokenizer.encode(output):
            start = time.perf_counter()
            llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)
            step_s.append(time.perf_counter() - start)
            assert matcher.consume_token(token), matcher.get_error()
        rows.append(_row("llguidance", kind, grammar, setup_s, compile_s, step_s))
    return rows


def bench_xgrammar(tokenizer) -> list[dict]:
    import transformers
    import xgrammar

    start = time.perf_counter()
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend)
    info = xgrammar.TokenizerInfo.from_huggingface(
        hf_tokenizer, vocab_size=VOCAB_SIZE, stop_token_ids=[tokenizer.token_to_id("<|im_end|>")]
    )
    setup_s = time.perf_counter() - start
    rows = []
    for kind, grammar, output in CASES:
        compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        start = time.perf_counter()
        if kind == "json":
            compiled = compiler.compile_json_schema(json.dumps(grammar))
        else:
            compiled = compiler.compile_regex(grammar)
        compile_s = time.perf_counter() - start
        matcher = xgrammar.GrammarMatcher(compiled)
        bitmask = xgrammar.allocate_token_bitmask(1, VOCAB_SIZE)
        step_s = []
        for token in tokenizer.encode(output):
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            step_s.append(time.perf_counter() - start)
            assert matcher.accept_token(token)
        rows.append(_row("xgrammar", kind, grammar, setup_s, compile_s, step_s))
    return rows


def _row(engine: str, kind: str, grammar, setup_s: float, compile_s: float, step_s: list[float]) -> dict:
    name = grammar["required"][0] if kind == "json" else grammar
    return {
        "engine": engine,
        "grammar": f"{kind}:{name}"[:40],
        "tokenizer_setup_ms": 1e3 * setup_s,
        "compile_ms": 1e3 * compile_s,
        "mask_median_us": 1e6 * statistics.median(step_s),
        "mask_max_us": 1e6 * max(step_s),
        "steps": len(step_s),
    }


def main() -> None:
    tokenizer = load_tokenizer(None)
    rows = bench_llguidance(tokenizer) + bench_xgrammar(tokenizer)
    print("| engine | grammar | tokenizer setup ms | compile ms | mask median µs | mask max µs | steps |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['engine']} | `{row['grammar']}` | {row['tokenizer_setup_ms']:.0f} | "
            f"{row['compile_ms']:.1f} | {row['mask_median_us']:.0f} | {row['mask_max_us']:.0f} | "
            f"{row['steps']} |"
        )


if __name__ == "__main__":
    main()
