# the skinny experts' down split swept; the fp8 skinny matmuls' split swept; Qwen3-30B-A3B fp8 single stream with both
set -u
source .device/prep.sh
date -u
timeout 270 python3 -m experiments.kernels.moe_bench --fp8 --move-bits --skinny > $OUT/moe-bench-fp8-skinny.log 2>&1; tail -4 $OUT/moe-bench-fp8-skinny.log | cut -c1-200
grep -E "^(GATE_UP_LAUNCH|DOWN_LAUNCH|DOWN_SPLITS)\[1\] =" $OUT/moe-bench-fp8-skinny.log > /tmp/skinny.py
date -u
timeout 150 python3 -m experiments.kernels.skinny_matmul_bench --fp8 --move-bits --wide --model qwen3-30b-a3b --splits 2,4,8 --jobs 16 > $OUT/skinny-fp8-30b-splits.log 2>&1; grep -E "CONFIGS|SPLIT_K|Error" $OUT/skinny-fp8-30b-splits.log
grep -E "^(FP8_CONFIGS|SPLIT_K)" $OUT/skinny-fp8-30b-splits.log > /tmp/splits.py
date -u
L="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 workload.repeats=2 compile.max_capture_batch_size=4"
T="import sys, nvllm.ops.skinny_matmul as m, nvllm.ops.moe_skinny_triton as s; exec(open('/tmp/splits.py').read(), {'FP8_CONFIGS': m.FP8_CONFIGS, 'SPLIT_K': m.SPLIT_K}); exec(open('/tmp/skinny.py').read(), vars(s)); print('table', m.FP8_CONFIGS, m.SPLIT_K, s.GATE_UP_LAUNCH, s.DOWN_LAUNCH, s.DOWN_SPLITS); from nvllm.cli import run; run(sys.argv[1:])"
timeout 80 python3 -m nvllm.run $L hydra.run.dir=/tmp/l0 > $OUT/l30-fp8.log 2>&1; grep -E "tok/s" $OUT/l30-fp8.log | tail -1
timeout 80 python3 -c "$T" $L hydra.run.dir=/tmp/l1 > $OUT/l30-fp8-splits.log 2>&1; grep -E "tok/s|^table" $OUT/l30-fp8-splits.log | tail -2
date -u
