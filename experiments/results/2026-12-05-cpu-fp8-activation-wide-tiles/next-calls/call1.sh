# Next session's first call (~9 min; carry [".device/wheels", ".device/fa2.tar.xz", ".device/prep.sh", ".device/callNext.sh"]):
# the fp8-activation GPU test with its new measures; fp8-activation launch shapes (gate/up tiles now up to four
# quantization groups) at decode sizes at the table's row tiles, and at prefill sizes at 128-pair tiles
set -u
source .device/prep.sh
date -u
timeout 150 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k fp8_activations > $OUT/gpu-fp8a-tests.log 2>&1; tail -3 $OUT/gpu-fp8a-tests.log
date -u
timeout 240 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 8,32,64,128,256,1024 > $OUT/sweep-fp8a-decode-16.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-decode-16.log | cut -c1-200 | tail -30
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-decode-16.log > $OUT/fp8a_table_decode_16.py
date -u
timeout 180 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 2048,8192 --row-tile 128 > $OUT/sweep-fp8a-prefill-128.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-prefill-128.log | cut -c1-200
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-prefill-128.log > $OUT/fp8a_table_prefill_128.py
date -u
