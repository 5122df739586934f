# The pairs' outputs in bf16 (moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE): its GPU tests, and the layer with and
# without it on bf16 activations (decode) and on fp8 activations (prefill). About 5 minutes.
set -u
source .device/prep.sh
date -u
timeout 120 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "within_bf16_noise or fp8_activations_equal" > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
for flags in "--fp8 --move-bits" "--fp8 --move-bits --pairs-bf16" "--fp8 --fp8-activations" "--fp8 --fp8-activations --pairs-bf16"; do
  name=$(echo $flags | tr -d ' -')
  timeout 70 python3 -m experiments.kernels.moe_bench $flags > $OUT/mb-$name.log 2>&1; echo "$flags"; tail -13 $OUT/mb-$name.log | cut -c1-160
  date -u
done
