# The routing kernels' GPU tests, then decode attention at the 30B's heads on the bench's rows at 1, 2 and 4 KV splits
# (probe_attention_splits.py from 2026-12-06-h100-fp8-sums-and-small-kernels/next-calls, copied to .device/).
set -u
source .device/prep.sh
date -u
timeout 150 python3 -m pytest -m gpu -q tests/ops/test_moe_routing_gpu.py > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
timeout 100 python3 .device/probe_attention_splits.py > $OUT/probe-attention-splits.log 2>&1; grep -v -i warn $OUT/probe-attention-splits.log | tail -8
date -u
