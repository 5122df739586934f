# Whether the experts should multiply fp8 activations at decode batches too (model.fp8_activations). At
# 256 tokens on an H100 their swept matmuls took 213.9 us against bf16 activations' 235.2 (call4). Here:
# the decode bands swept on fp8 activations (16-256 tokens), then the 30B bench at the defaults and with
# the swept table and moe_ops.FP8_ACTIVATIONS_MIN_TOKENS = 3 (a single stream's 1-2 tokens keep the skinny
# experts), in one call. About 9 minutes. If it wins: paste the table, lower the threshold, run the GPU
# tests of fp8 activations at 3-256 tokens and the engine's fp8 tests.
# carry: .device/wheels .device/fa2.tar.xz .device/prep.sh (this script as .device/call-i.sh)
set -u
source .device/prep.sh
date -u
timeout 170 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --intermediate-per-row --jobs 15 --tokens 16,32,64,128,256 > $OUT/sweep-decode.log 2>&1; grep -E "tokens|band" $OUT/sweep-decode.log | cut -c1-220
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-decode.log > $OUT/decode_table.py
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 185 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 185 python3 -c "import math, runpy, sys
from nvllm.ops import moe_ops, moe_tiles
namespace = runpy.run_path('$OUT/decode_table.py', init_globals={'GroupedMatmulConfig': moe_tiles.GroupedMatmulConfig, 'math': math})
moe_tiles.FP8_ACTIVATION_TILE_CONFIGS = namespace['FP8_ACTIVATION_TILE_CONFIGS']
moe_ops.FP8_ACTIVATIONS_MIN_TOKENS = 3
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-fp8a-decode > $OUT/b30-fp8a-decode.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-fp8a-decode.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
