set -u
source .device/prep.sh > /dev/null 2>&1
date -u
F=nvllm/ops/moe_align_triton.py
cp $F /tmp/align_fixed.py
sed -i 's/^@triton.jit(do_not_specialize=.*/@triton.jit/' $F
grep -c "do_not_specialize" $F
echo "== break-on-purpose: the chunks' kernels specialized again"
timeout 200 python3 -m pytest -q -m gpu tests/experiments/test_warm_up_gpu.py -x 2>&1 | tail -4 | cut -c1-600
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=1 model.fp8_activations=true profile.enabled=true"
echo "== bench A: specialized (the tree before)"
timeout 200 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30a > $OUT/b30a.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30a.log | cut -c1-300
grep prefill $OUT/b30a/steps.csv | awk -F, '{printf "%s:%s:%.0f ", $1, $6, $14} END {print ""}'
cp /tmp/align_fixed.py $F
grep -c "do_not_specialize" $F
date -u
echo "== the test at the fix"
timeout 200 python3 -m pytest -q -m gpu tests/experiments/test_warm_up_gpu.py tests/ops/test_moe_routing_gpu.py 2>&1 | tail -4 | cut -c1-600
echo "== bench B: the fix"
timeout 200 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30b > $OUT/b30b.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30b.log | cut -c1-300
grep prefill $OUT/b30b/steps.csv | awk -F, '{printf "%s:%s:%.0f ", $1, $6, $14} END {print ""}'
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -name "figures" -type d -prune -exec rm -rf {} +
