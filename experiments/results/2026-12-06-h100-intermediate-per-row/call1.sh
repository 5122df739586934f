# tree 03d3447 (code of b3d44cd; FP8_INTERMEDIATE_PER_ROW off): the prefill layer's probe over the intermediate's scales (groups of
# 64, of 128, a scale a row; each with its error from its reference); the fp8-activation GPU tests in both modes
set -u
source .device/prep.sh
date -u
timeout 170 python3 .device/probe_prefill.py > $OUT/probe-prefill.log 2>&1; cat $OUT/probe-prefill.log | cut -c1-250
date -u
timeout 100 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "fp8_activations_equal" > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
