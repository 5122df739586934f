set -u
source .device/prep.sh > /dev/null 2>&1
date -u
timeout 110 python3 -m experiments.kernels.moe_bench --fp8 --fp8-activations > $OUT/mb-fp8a-table.log 2>&1; cut -c1-130 $OUT/mb-fp8a-table.log | tail -6
date -u
timeout 110 python3 -c "import sys, math, nvllm.ops.moe_tiles as t
C = t.GroupedMatmulConfig
t.FP8_ACTIVATION_TILE_CONFIGS = t.FP8_ACTIVATION_TILE_CONFIGS[:4] + ((math.inf, C(128, 128, 8, 3), C(128, 64, 8, 3)),)
t.FP8_ACTIVATION_ROW_TILES = (16, 32, 128)
print(t.row_tile(65536, 128, True), t.fp8_activation_config(65536, 128, True), flush=True)
sys.argv = ['moe_bench', '--fp8', '--fp8-activations']
import runpy; runpy.run_module('experiments.kernels.moe_bench', run_name='__main__')" > $OUT/mb-fp8a-wide.log 2>&1; cut -c1-130 $OUT/mb-fp8a-wide.log | tail -7
date -u
