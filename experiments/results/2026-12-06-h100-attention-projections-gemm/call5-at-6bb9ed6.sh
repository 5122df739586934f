# At 6bb9ed6: the fp8 GEMM's GPU tests (the 30B's new table bands among them), then the 30B bench at the
# defaults and nvllm's Qwen3-8B bench beside it, in one call.
set -u
source .device/prep.sh
date -u
timeout 150 python3 -m pytest -q -m gpu tests/ops/test_fp8_gemm.py -p no:cacheprovider > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error|bound" $OUT/b30.log | cut -c1-250
date -u
timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
