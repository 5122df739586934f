# On an H200: the aim (the 30B bench, nvllm's Qwen3-8B beside it). On any other GPU: a fresh
# engine's first prompts (no warm-up but start-up's), timed, with Triton's compiles counted.
set -u
source .device/prep.sh > /dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
  timeout 185 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
  date -u
  timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
else
  timeout 200 python3 .device/probe_cold_first_prompts.py qwen3-30b-a3b > $OUT/cold-30b.log 2>&1; grep -vE "^\s*$" $OUT/cold-30b.log | grep -E "startup|prompt|Error" | cut -c1-400
fi
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
