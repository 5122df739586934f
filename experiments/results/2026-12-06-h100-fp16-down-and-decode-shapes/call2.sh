# the fp8-activation matmuls' launch shapes swept at decode batches; the layer on fp8 activations at the swept
# shapes against its table's
set -u
source .device/prep.sh
date -u
timeout 220 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 12 --tokens 16,32,64,128,256,512 > $OUT/sweep-fp8a-decode.log 2>&1; grep -E "tokens|band" $OUT/sweep-fp8a-decode.log | cut -c1-200
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-decode.log > $OUT/fp8a_decode.py
date -u
timeout 70 python3 -m experiments.kernels.moe_bench --fp8 --fp8-activations > $OUT/mb-fp8a-table.log 2>&1; tail -13 $OUT/mb-fp8a-table.log | cut -c1-160
date -u
timeout 70 python3 -c "import sys, nvllm.ops.moe_tiles as t
found = {}
exec(open('$OUT/fp8a_decode.py').read(), vars(t), found)
t.FP8_ACTIVATION_TILE_CONFIGS = found['FP8_ACTIVATION_TILE_CONFIGS'][:4] + t.FP8_ACTIVATION_TILE_CONFIGS[4:]
print(t.FP8_ACTIVATION_TILE_CONFIGS, flush=True)
from nvllm.ops import e4m3_to_bf16; e4m3_to_bf16.ENABLED = False
from experiments.kernels.moe_bench import main; main(True, True)" > $OUT/mb-fp8a-swept.log 2>&1; tail -13 $OUT/mb-fp8a-swept.log | cut -c1-160
date -u
