# fp8 scratch-copy kernel: its GPU tests; the 8B shared-prefix workload, bf16 against fp8 cache, 3 repeats each
set -u
source .device/prep.sh
date -u
timeout 60 python3 -m pytest -m gpu -q -x tests/ops/test_fp8_kv_cache_gpu.py > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log | cut -c1-300
date -u
timeout 200 python3 -m nvllm.run -m +experiment=shared_prefix model=qwen3-8b workload.repeats=3 cache.dtype=auto,fp8 hydra.sweep.dir=$OUT/sp > $OUT/sp8.log 2>&1; grep -E "Throughput|KV read|cache.dtype" $OUT/sp8.log | cut -c1-250
date -u
