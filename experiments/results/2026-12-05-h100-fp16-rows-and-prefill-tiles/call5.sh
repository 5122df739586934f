set -u
source .device/prep.sh > /dev/null 2>&1
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=2 model.fp8_activations=true"
SWEPT="import sys, math, nvllm.ops.moe_tiles as t, nvllm.ops.moe_triton as m
C = t.GroupedMatmulConfig
t.FP8_ACTIVATION_TILE_CONFIGS = t.FP8_ACTIVATION_TILE_CONFIGS[:4] + ((math.inf, C(64, 128, 4, 3), C(256, 64, 8, 4)),)"
date -u
timeout 130 python3 -c "$SWEPT
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-fp8a-swept > $OUT/b30-fp8a-swept.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-fp8a-swept.log | cut -c1-250
date -u
timeout 130 python3 -c "$SWEPT
m.GATE_UP_IN_FP16 = True
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-fp8a-swept-fp16 > $OUT/b30-fp8a-swept-fp16.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-fp8a-swept-fp16.log | cut -c1-250
date -u
find $OUT -name "*.json*" -size +15M -delete; rm -rf $OUT/*/wandb
