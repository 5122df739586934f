# Whether fp8 activations can pay at a full decode batch (256 tokens, 16 pairs an expert): the grouped
# matmuls on fp8 activations (a scale a row, sums unpromoted) swept at 256 tokens, beside the same sweep on
# bf16 activations (the engine's decode path). About 4 minutes.
set -u
source .device/prep.sh
date -u
timeout 110 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --intermediate-per-row --jobs 15 --tokens 256 > $OUT/sweep-fp8a-256.log 2>&1; grep -E "tokens|band" $OUT/sweep-fp8a-256.log | cut -c1-220
date -u
timeout 90 python3 -m experiments.kernels.moe_tile_sweep --fp8 --jobs 15 --tokens 256 > $OUT/sweep-bf16a-256.log 2>&1; grep -E "tokens|band" $OUT/sweep-bf16a-256.log | cut -c1-220
date -u
