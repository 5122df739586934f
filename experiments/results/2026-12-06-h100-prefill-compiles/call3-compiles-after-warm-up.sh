set -u
source .device/prep.sh > /dev/null 2>&1
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 260 python3 .device/probe_jit.py $B profile.enabled=true hydra.run.dir=$OUT/b30 > $OUT/b30-jit.log 2>&1
grep -nE "Repeat|Throughput|Startup|Error" $OUT/b30-jit.log | cut -c1-250
grep -c "^\[jit " $OUT/b30-jit.log
# the compiles after the warm-up: those after the last line the warm-up prints, and their neighbours
sed -n "/warm-up done/,\$p" $OUT/b30-jit.log | grep -E "^\[jit |Repeat" | head -40 | cut -c1-700
S=$(find $OUT/b30 -name steps.csv | head -1); grep prefill $S | cut -c1-200
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
