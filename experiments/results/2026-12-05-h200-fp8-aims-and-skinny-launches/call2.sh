# H200: fp8 skinny matmul launch shapes for Qwen3-30B-A3B, then its fp8 single stream with and without them
set -u
source .device/prep.sh
date -u
timeout 200 python3 -m experiments.kernels.skinny_matmul_bench --fp8 --move-bits --wide --model qwen3-30b-a3b --jobs 16 > $OUT/skinny-fp8-30b.log 2>&1; grep -E "FP8_CONFIGS|Error" $OUT/skinny-fp8-30b.log
grep "^FP8_CONFIGS" $OUT/skinny-fp8-30b.log > /tmp/fp8cfg.py
date -u
L="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 workload.repeats=2 compile.max_capture_batch_size=4"
timeout 130 python3 -m nvllm.run $L hydra.run.dir=/tmp/l0 > $OUT/l30-fp8.log 2>&1; grep -E "tok/s" $OUT/l30-fp8.log | tail -1
date -u
T="import sys, nvllm.ops.skinny_matmul as m; exec(open('/tmp/fp8cfg.py').read(), {'FP8_CONFIGS': m.FP8_CONFIGS}); print('table', m.FP8_CONFIGS); from nvllm.cli import run; run(sys.argv[1:])"
timeout 130 python3 -c "$T" $L hydra.run.dir=/tmp/l1 > $OUT/l30-fp8-tables.log 2>&1; grep -E "tok/s|^table" $OUT/l30-fp8-tables.log | tail -2
date -u
