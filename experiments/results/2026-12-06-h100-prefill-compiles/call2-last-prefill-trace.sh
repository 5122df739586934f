set -u
source .device/prep.sh > /dev/null 2>&1
date -u
TORCH_LOGS=recompiles timeout 200 python3 -m nvllm.run +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 model.fp8_activations=true workload.repeats=1 profile.enabled=true profile.torch_trace_steps=1 profile.torch_trace_start_step=8 hydra.run.dir=$OUT/b30t > $OUT/b30t.log 2>&1; grep -E "Throughput|Startup" $OUT/b30t.log | cut -c1-250
S=$(find $OUT/b30t -name steps.csv | head -1); head -11 $S | cut -c1-300
grep -iE "recompil|guard" $OUT/b30t.log | head -20 | cut -c1-400
T=$(find $OUT/b30t -name "*trace*.json*" | head -1); echo "trace: $T"; [ -n "$T" ] && python3 -m experiments.studies.trace_kernels $T --top 60 > $OUT/b30-last-prefill-trace.txt 2>&1; head -75 $OUT/b30-last-prefill-trace.txt
find $OUT/b30t -name "*.json*" -size +15M -delete
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
date -u
