# Minimal (~8 min): the fp16-rows GPU test; the layer at every batch size moving bits and on fp16 rows; the
# fp8-activation prefill sweep at 128-pair tiles
set -u
source .device/prep.sh
date -u
timeout 100 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "fp16_rows" > $OUT/gpu-fp16-tests.log 2>&1; tail -3 $OUT/gpu-fp16-tests.log
date -u
timeout 100 python3 -m experiments.kernels.moe_bench --fp8 --move-bits > $OUT/moe-bench-bits.log 2>&1; cut -c1-140 $OUT/moe-bench-bits.log | tail -13
date -u
timeout 100 python3 -m experiments.kernels.moe_bench --fp8 --move-bits --fp16-gate-up > $OUT/moe-bench-fp16.log 2>&1; cut -c1-140 $OUT/moe-bench-fp16.log | tail -13
date -u
timeout 150 python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --jobs 14 --tokens 8192 --row-tile 128 > $OUT/sweep-fp8a-prefill-128.log 2>&1; grep -E "best|band" $OUT/sweep-fp8a-prefill-128.log | cut -c1-200
date -u
