set -u
source .device/prep.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=2 model.fp8_activations=true"
date -u
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30-fp8a-table > $OUT/b30-fp8a-table.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-fp8a-table.log | cut -c1-250
date -u
timeout 170 python3 -c "import sys, math, nvllm.ops.moe_tiles as t
C = t.GroupedMatmulConfig
t.FP8_ACTIVATION_TILE_CONFIGS = t.FP8_ACTIVATION_TILE_CONFIGS[:4] + ((math.inf, C(128, 128, 8, 3), C(128, 64, 8, 3)),)
t.FP8_ACTIVATION_ROW_TILES = (16, 32, 128)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-fp8a-wide > $OUT/b30-fp8a-wide.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-fp8a-wide.log | cut -c1-250
date -u
find $OUT -name "*.json*" -size +15M -delete
