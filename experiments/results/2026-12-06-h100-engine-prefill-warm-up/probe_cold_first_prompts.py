"""A fresh engine (no harness warm-up), as `nvllm serve` or a user's LLM has it: each prompt's prefill time
and the Triton kernels compiled during it. Prompts of several lengths, one at a time, each its own token."""
import sys
import time

import torch

from nvllm import LLM, SamplingParams
from nvllm.profiling.kernel_compiles import triton_compiles

model = sys.argv[1]
overrides = dict(max_model_len=16384, quantization="fp8", kv_cache_dtype="fp8", model__fp8_activations=True) if "30b" in model else dict(max_model_len=16384)
start = time.perf_counter()
llm = LLM(model, **overrides)
print(f"startup {time.perf_counter() - start:.1f} s", flush=True)
params = SamplingParams(max_tokens=1, ignore_eos=True)
for token, length in enumerate((100, 613, 1500, 3001, 6007, 11755, 613, 3001, 11755), start=10):
    torch.cuda.synchronize()
    with triton_compiles() as compiled:
        start = time.perf_counter()
        llm.generate([[token] * length], params, use_tqdm=False)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
    print(f"prompt {length:6d}: {ms:8.1f} ms, {len(compiled)} compiles {sorted(set(compiled))}", flush=True)
llm.shutdown()
