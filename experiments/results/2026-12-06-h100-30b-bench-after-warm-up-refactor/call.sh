# HEAD on whatever GPU came: the 30B bench at the defaults (start-up's memory profile and prefill warm-up on the GPU)
set -u
source .device/prep.sh > /dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 240 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; echo rc $?; grep -E "Warning|Repeat|Throughput|Startup|Error|KV|blocks" $OUT/b30.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
