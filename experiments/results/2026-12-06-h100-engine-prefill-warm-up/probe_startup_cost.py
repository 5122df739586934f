"""Start-up's parts (load, compile, capture) of Qwen3-30B-A3B as the bench runs it (fp8 experts and
activations, fp8 cache), with `compile.prefill_warm_up` as argv[1] says; compile_s includes the warm-up."""
import sys
import time

from nvllm import LLM

start = time.perf_counter()
llm = LLM(
    "qwen3-30b-a3b",
    quantization="fp8",
    kv_cache_dtype="fp8",
    model__fp8_activations=True,
    max_num_batched_tokens=16384,
    compile__prefill_warm_up=sys.argv[1],
)
total = time.perf_counter() - start
timings = ", ".join(f"{k} {v:.2f}" for k, v in llm.model_runner.timings.items())
print(f"prefill_warm_up={sys.argv[1]}: start-up {total:.1f} s ({timings})", flush=True)
llm.shutdown()
