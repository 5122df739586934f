# The 30B bench at the defaults of d45d989 (sums unpromoted, the sort in chunks from 8,192 pairs, the pairs'
# outputs in bf16), nvllm's Qwen3-8B bench beside it, and the routing kernels' GPU tests (the sort is their
# oracle).
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 185 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
timeout 90 python3 -m pytest -m gpu -q tests/ops/test_moe_routing_gpu.py > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
