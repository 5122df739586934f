# H200: the 8B shared-prefix workload, bf16 against fp8 cache (3 repeats each); the 30B fp8 latency with and without the o projection's 2-way split
set -u
source .device/prep.sh
date -u
timeout 220 python3 -m nvllm.run -m +experiment=shared_prefix model=qwen3-8b workload.repeats=3 cache.dtype=auto,fp8 hydra.sweep.dir=$OUT/sp > $OUT/sp8.log 2>&1; grep -E "Throughput|KV read|cache.dtype|tok/s" $OUT/sp8.log | cut -c1-250
date -u
timeout 160 python3 -m nvllm.run +experiment=latency model=qwen3-30b-a3b model.quantization=fp8 workload.repeats=2 compile.max_capture_batch_size=4 hydra.run.dir=$OUT/lat0 > $OUT/lat0.log 2>&1; grep -E "tok/s|Throughput|latency" $OUT/lat0.log | tail -6 | cut -c1-250
date -u
timeout 160 python3 -c "import sys, nvllm.ops.skinny_matmul as m; m.SPLIT_K[(2048, 4096, 1)] = 2; m.FP8_CONFIGS[(2048, 4096)] = (32, 256, 4, 4); from nvllm.cli import run; run(sys.argv[1:])" +experiment=latency model=qwen3-30b-a3b model.quantization=fp8 workload.repeats=2 compile.max_capture_batch_size=4 hydra.run.dir=$OUT/lat1 > $OUT/lat1.log 2>&1; grep -E "tok/s|Throughput|latency" $OUT/lat1.log | tail -6 | cut -c1-250
date -u
