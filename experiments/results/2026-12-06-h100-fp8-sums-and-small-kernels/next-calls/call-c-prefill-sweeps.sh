# The prefill band of fp8 activations swept in full for both quantizations of the intermediate: a scale a
# row (the engine's; its shapes were probed, not swept) and groups of 128 (three shapes probed, as fast as
# the row's first ones, and more accurate). About 8 minutes; paste the faster's table, then bench it.
set -u
source .device/prep.sh
date -u
timeout 270 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --intermediate-per-row --jobs 14 --tokens 2048,8192 > $OUT/sweep-rows.log 2>&1; grep -E "tokens|band" $OUT/sweep-rows.log | cut -c1-200
date -u
timeout 270 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --intermediate-group 128 --jobs 14 --tokens 2048,8192 > $OUT/sweep-groups-128.log 2>&1; grep -E "tokens|band" $OUT/sweep-groups-128.log | cut -c1-200
date -u
