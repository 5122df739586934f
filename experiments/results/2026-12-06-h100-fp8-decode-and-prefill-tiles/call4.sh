# The 30B bench: the defaults; prefill's band swept at 64-pair tiles; 128-pair tiles for prefill with their sweep's band.
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 170 python3 -c "import sys
from nvllm.ops import moe_tiles as t
G = t.GroupedMatmulConfig
t.FP8_ACTIVATION_TILE_CONFIGS = t.FP8_ACTIVATION_TILE_CONFIGS[:-1] + ((float('inf'), G(256, 128, 8, 3), G(256, 64, 4, 4)),)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-64 > $OUT/b30-64.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-64.log | cut -c1-250
date -u
timeout 170 python3 -c "import sys
from nvllm.ops import moe_tiles as t
G = t.GroupedMatmulConfig
t.FP8_ACTIVATION_TILE_CONFIGS = t.FP8_ACTIVATION_TILE_CONFIGS[:-1] + ((float('inf'), G(128, 128, 8, 4), G(256, 128, 8, 4)),)
t.FP8_ACTIVATION_ROW_TILES = (16, 32, 128)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-128 > $OUT/b30-128.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-128.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
