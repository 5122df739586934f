# H200: GPU tests of fp16 rows and fp8 activations; fp8-activation prefill tiles at 128 and 64 pairs
set -u
source .device/prep.sh
date -u
timeout 150 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "fp16_rows or fp8_activations" > $OUT/gpu-tests.log 2>&1; tail -4 $OUT/gpu-tests.log
date -u
timeout 180 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 2048,8192 --row-tile 128 > $OUT/sweep-fp8a-prefill-128.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-prefill-128.log | cut -c1-200
mkdir -p .device/fp8a_tables; sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-prefill-128.log > .device/fp8a_tables/prefill_128.py; cp .device/fp8a_tables/prefill_128.py $OUT/
date -u
timeout 170 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 2048,8192 > $OUT/sweep-fp8a-prefill-64.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-prefill-64.log | cut -c1-200
sed -n '/^FP8_ACTIVATION_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8a-prefill-64.log > .device/fp8a_tables/prefill_64.py; cp .device/fp8a_tables/prefill_64.py $OUT/
cp $OUT/sweep-fp8a-prefill-*.log .device/fp8a_tables/
date -u
