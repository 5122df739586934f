# GPU tests of the split reduction and fp8 skinny shapes; the 8B shared-prefix workload traced, bf16 against fp8 cache
set -u
source .device/prep.sh
date -u
timeout 150 python3 -m pytest -m gpu -q tests/ops/test_linear_ops.py tests/ops/test_moe_skinny.py tests/models/test_qwen3_moe_gpu.py -k "split or chosen_skinny or skinny or fp8_experts_computes" > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log | cut -c1-300
date -u
for c in auto fp8; do
timeout 170 python3 -m nvllm.run +experiment=shared_prefix model=qwen3-8b workload.repeats=1 cache.dtype=$c profile.enabled=true profile.torch_trace_steps=2 profile.torch_trace_start_step=8 hydra.run.dir=$OUT/sp-$c > $OUT/sp-$c.log 2>&1; grep -E "tok/s|KV read" $OUT/sp-$c.log | tail -3 | cut -c1-250
head -22 $OUT/sp-$c/kernels.txt 2>/dev/null | cut -c1-200
rm -f $OUT/sp-$c/trace.json
date -u
done
