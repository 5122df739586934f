# The warm-up's GPU test, its two cases of the 30B bench's configuration (compiled; eager with the warm-up
# asked for), each engine in its own process, prefill steps only.
set -u
source .device/prep.sh > /dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 140 python3 -m pytest -q -m gpu tests/runner/test_prefill_warm_up_gpu.py -k "30b-bench" -p no:cacheprovider -rA > $OUT/warm-up-test.log 2>&1; grep -E "passed|failed|PASSED|FAILED|compiled after|Error" $OUT/warm-up-test.log | cut -c1-500
date -u
