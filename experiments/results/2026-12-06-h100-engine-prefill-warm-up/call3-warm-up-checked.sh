# On an H200: the aim (the 30B bench, nvllm's Qwen3-8B beside it), then the start-up warm-up's GPU test.
# On any other GPU: a fresh engine's first prompts with start-up's prefill warm-up (cold Triton cache), the
# GPU test, and the 30B bench.
set -u
source .device/prep.sh > /dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 200 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
  date -u
  timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
  date -u
  timeout 200 python3 -m pytest -q -m gpu tests/runner/test_prefill_warm_up_gpu.py -p no:cacheprovider > $OUT/warm-up-test.log 2>&1; grep -E "passed|failed|compiled after|Error" $OUT/warm-up-test.log | cut -c1-600
else
  timeout 150 python3 .device/probe_cold_first_prompts.py qwen3-30b-a3b > $OUT/cold-30b.log 2>&1; grep -E "startup|prompt|Error" $OUT/cold-30b.log | cut -c1-400
  date -u
  timeout 220 python3 -m pytest -q -m gpu tests/runner/test_prefill_warm_up_gpu.py -p no:cacheprovider > $OUT/warm-up-test.log 2>&1; grep -E "passed|failed|compiled after|Error" $OUT/warm-up-test.log | cut -c1-600
  date -u
  timeout 190 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
fi
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
