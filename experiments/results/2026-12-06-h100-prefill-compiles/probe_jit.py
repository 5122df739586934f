"""Run nvllm's CLI with a Triton hook that prints every kernel compiled (or loaded from Triton's disk cache
for the first time in this process), with the time, so that compiles inside measured repeats show."""

import sys
import time

import triton

T0 = time.time()


def hook(**kwargs):
    repr_ = kwargs.get("repr", "?")
    print(f"[jit {time.time() - T0:8.2f}s] {repr_[:60]} | {repr_[repr_.find('(') :][:900]}", flush=True)
    return False


triton.knobs.runtime.jit_cache_hook = hook
import experiments.harness.repeats as repeats  # noqa: E402
from nvllm.cli import run  # noqa: E402

warm_up = repeats.warm_up


def warm_up_marked(llm):
    warm_up(llm)
    print(f"[jit {time.time() - T0:8.2f}s] ===== warm-up done =====", flush=True)


repeats.warm_up = warm_up_marked

print(f"[jit start {time.strftime('%H:%M:%S')}]", flush=True)
run(sys.argv[1:])
