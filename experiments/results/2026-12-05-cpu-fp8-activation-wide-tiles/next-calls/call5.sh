# fp8 experts' gate/up on fp16 rows (GATE_UP_IN_FP16) against moving bits (~8 min; carry as callNext.sh, with
# callNext5.sh): the GPU test; the layer at every batch size both ways; the 30B bench moving bits (bf16
# activations), against call 3's first bench (fp16 rows, the default since 6f320b7) on the same warm machine
set -u
source .device/prep.sh
date -u
timeout 120 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k fp16_rows > $OUT/gpu-fp16-tests.log 2>&1; tail -3 $OUT/gpu-fp16-tests.log
date -u
timeout 100 python3 -m experiments.kernels.moe_bench --fp8 --move-bits --gate-up-bf16 > $OUT/moe-bench-bits.log 2>&1; cut -c1-150 $OUT/moe-bench-bits.log | tail -13
timeout 100 python3 -m experiments.kernels.moe_bench --fp8 --move-bits > $OUT/moe-bench-fp16.log 2>&1; cut -c1-150 $OUT/moe-bench-fp16.log | tail -13
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3"
timeout 170 python3 -c "import sys, nvllm.ops.moe_triton as m; m.GATE_UP_IN_FP16 = False; from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-bits > $OUT/b30-bits.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-bits.log | cut -c1-250
date -u
find $OUT -name "*.json*" -size +15M -delete
