# Second call (~8 min; carry as callNext.sh, with callNext2.sh): prefill sizes at the table's 64-pair tiles (against
# call 1's 128); decode sizes at 32-pair tiles (against call 1's 16: 16-pair tiles read an expert 1.43 times at
# 256 tokens); then the fp8-activation accuracy diagnostic (both measures at every size)
set -u
source .device/prep.sh
date -u
timeout 180 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 2048,8192 > $OUT/sweep-fp8a-prefill-64.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-prefill-64.log | cut -c1-200
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-prefill-64.log > $OUT/fp8a_table_prefill_64.py
date -u
timeout 150 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 8,32,64,128,256 --row-tile 32 > $OUT/sweep-fp8a-decode-32.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-decode-32.log | cut -c1-200
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-decode-32.log > $OUT/fp8a_table_decode_32.py
date -u
timeout 110 python3 -m experiments.studies.fp8_activation_kernels_by_batch > $OUT/fp8a-diag.log 2>&1; tail -15 $OUT/fp8a-diag.log
date -u
