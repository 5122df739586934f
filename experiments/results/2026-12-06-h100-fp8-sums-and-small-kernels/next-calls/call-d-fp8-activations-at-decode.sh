# Whether fp8 activations now pay at decode batches. With the intermediate in groups their down matmul waited
# on its MMAs at every 64-column group and the layer was 9-11 % slower than bf16 activations at 16-256
# tokens (2026-12-06-h100-fp16-down-and-decode-shapes.md); a row's scale removes those waits. The decode
# bands' shapes under a row's scale are the groups' (unswept): sweep them, then time the layer at the
# swept table against bf16 activations. About 8 minutes. If it wins below 1,024 tokens, lower
# moe_ops.FP8_ACTIVATIONS_MIN_TOKENS (and bench).
set -u
source .device/prep.sh
date -u
timeout 300 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --intermediate-per-row --jobs 14 --tokens 16,32,64,128,256,512 > $OUT/sweep-rows-decode.log 2>&1; grep -E "tokens|band" $OUT/sweep-rows-decode.log | cut -c1-200
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-rows-decode.log > $OUT/rows_decode_table.py
date -u
timeout 70 python3 -m experiments.kernels.moe_bench --fp8 --move-bits > $OUT/mb-bf16-activations.log 2>&1; tail -13 $OUT/mb-bf16-activations.log | cut -c1-160
timeout 90 python3 -c "import math, runpy, sys
from nvllm.ops import moe_tiles
namespace = runpy.run_path('$OUT/rows_decode_table.py', init_globals={'GroupedMatmulConfig': moe_tiles.GroupedMatmulConfig, 'math': math})
moe_tiles.FP8_ACTIVATION_TILE_CONFIGS = namespace['FP8_ACTIVATION_TILE_CONFIGS']
print(moe_tiles.FP8_ACTIVATION_TILE_CONFIGS)
sys.argv = ['moe_bench', '--fp8', '--fp8-activations']
runpy.run_module('experiments.kernels.moe_bench', run_name='__main__')" > $OUT/mb-fp8-activations-swept.log 2>&1; tail -14 $OUT/mb-fp8-activations-swept.log | cut -c1-160
date -u
