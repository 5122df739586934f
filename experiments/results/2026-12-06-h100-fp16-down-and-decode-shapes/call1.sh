# H200, tree 400f74d (DOWN_IN_FP16 off): the 30B bench at the defaults (gate/up on fp16 rows) with fp8
# activations for prefill, three repeats; nvllm's Qwen3-8B bench beside it; fp16 rows' GPU tests (gate/up's and
# down's); the layer with down on fp16 rows against bf16
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3"
timeout 200 python3 -m nvllm.run $B model.fp8_activations=true hydra.run.dir=$OUT/b30-fp8a > $OUT/b30-fp8a.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-fp8a.log | cut -c1-250
date -u
timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
timeout 90 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "fp16_rows" > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
timeout 70 python3 -m experiments.kernels.moe_bench --fp8 --move-bits > $OUT/mb-fp16-gate-up.log 2>&1; tail -15 $OUT/mb-fp16-gate-up.log | cut -c1-160
date -u
timeout 70 python3 -m experiments.kernels.moe_bench --fp8 --move-bits --down-fp16 > $OUT/mb-fp16-down.log 2>&1; tail -15 $OUT/mb-fp16-down.log | cut -c1-160
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
