# H200, tree of 68480ab: GPU tests of the CUDA-core kernels; 30B fp8 single stream at the defaults; the bench aims (3 repeats) beside the 8B
set -u
source .device/prep.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
date -u
timeout 70 python3 -m pytest -m gpu -q -x tests/ops/test_moe_skinny.py tests/ops/test_linear_ops.py > $OUT/gpu-tests.log 2>&1; tail -1 $OUT/gpu-tests.log
date -u
timeout 110 python3 -m nvllm.run +experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 workload.repeats=2 hydra.run.dir=$OUT/l30 > $OUT/l30.log 2>&1; grep -E "Throughput|latency|Startup" $OUT/l30.log | cut -c1-200
date -u
timeout 200 python3 -m nvllm.run +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 model.fp8_activations=true workload.repeats=3 hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30.log | cut -c1-250
date -u
timeout 170 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
find $OUT -name "*.json*" -size +15M -delete
