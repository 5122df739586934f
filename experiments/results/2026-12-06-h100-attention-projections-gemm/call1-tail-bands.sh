# The bench's last sequences decode in batches of 3-32 rows (the tail was 16 % of an H200 bench's wall time,
# 2026-12-05-h200-moe-aims.md), on fp8 experts and bf16 activations: `FP8_TILE_CONFIGS`' band of at most 0.5
# pairs an expert (3-8 tokens), untimed since gate/up reads its input as fp16 rows, and its band of at most
# 2 (9-32 tokens), whose down was swept on an H200 only. Here: both swept (3-32 tokens), then the 30B bench
# at the defaults and with the swept table, in one call. About 8 minutes. If it wins: paste the two bands,
# run the fp8 experts' GPU tests.
# carry: .device/wheels .device/fa2.tar.xz .device/prep.sh (this script as .device/call-t.sh)
set -u
source .device/prep.sh
date -u
timeout 170 python3 -m experiments.kernels.moe_tile_sweep --fp8 --jobs 15 --tokens 3,4,6,8,16,24,32 > $OUT/sweep-tail.log 2>&1; grep -E "tokens|band" $OUT/sweep-tail.log | cut -c1-220
sed -n '/^FP8_TILE_CONFIGS/,/^)/p' $OUT/sweep-tail.log > $OUT/tail_table.py
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 170 python3 -c "import math, runpy, sys
from nvllm.ops import moe_tiles
namespace = runpy.run_path('$OUT/tail_table.py', init_globals={'GroupedMatmulConfig': moe_tiles.GroupedMatmulConfig, 'math': math})
moe_tiles.FP8_TILE_CONFIGS = namespace['FP8_TILE_CONFIGS']
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-tail > $OUT/b30-tail.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-tail.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
