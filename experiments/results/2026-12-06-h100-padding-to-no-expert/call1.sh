# tree c9a9585 (padding tokens to no expert; the intermediate a scale a row) beside e431604 (padding tokens
# follow the first token's experts) in .device/old: the 30B bench (fp8 experts, fp8 cache, fp8 activations
# for prefill), then nvllm's Qwen3-8B bench
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 190 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30.log | cut -c1-250
date -u
(cd .device/old && timeout 190 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30-old > $OUT/b30-old.log 2>&1); grep -E "Repeat|Throughput|Startup|rror" $OUT/b30-old.log | cut -c1-250
date -u
timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
