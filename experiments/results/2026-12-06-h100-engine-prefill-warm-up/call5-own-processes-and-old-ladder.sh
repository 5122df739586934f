# On an H200: the aim (the 30B bench, nvllm's Qwen3-8B beside it), then the warm-up's GPU test.
# On any other GPU: the warm-up's GPU test (each engine in its own process), then its eager 30B case with
# the earlier ladder (8, 32, ..., 32768), which must fail.
set -u
source .device/prep.sh > /dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
T=tests/runner/test_prefill_warm_up_gpu.py
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 200 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
  date -u
  timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
  date -u
  timeout 200 python3 -m pytest -q -m gpu $T -p no:cacheprovider > $OUT/warm-up-test.log 2>&1; grep -E "passed|failed|compiled after|Error" $OUT/warm-up-test.log | cut -c1-600
else
  timeout 300 python3 -m pytest -q -m gpu $T -p no:cacheprovider -rA > $OUT/warm-up-test.log 2>&1; grep -E "passed|failed|PASSED|FAILED|compiled after|Error" $OUT/warm-up-test.log | cut -c1-400
  date -u
  sed -i 's/^PREFILL_WARM_UP_TOKENS = .*/PREFILL_WARM_UP_TOKENS = (8, 32, 128, 512, 2048, 8192, 32768)/' nvllm/runner/prefill_warm_up.py
  grep -n "^PREFILL_WARM_UP_TOKENS" nvllm/runner/prefill_warm_up.py
  timeout 120 python3 -m pytest -q -m gpu $T -k "30b-bench-eager" -p no:cacheprovider > $OUT/warm-up-test-old-ladder-eager.log 2>&1; grep -E "passed|failed|compiled after" $OUT/warm-up-test-old-ladder-eager.log | cut -c1-400
fi
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
