# FMA skinny matmul: GPU tests (linear + skinny experts), sweep (best to /tmp/best_mm.json), engine A/B FMA matmuls on/off (experts FMA swept)
set -u
source .device/prep.sh
for f in .device/warm/triton-cache-*.tar.xz; do xz -dc $f | tar x -C /tmp; done
mkdir -p /tmp/tcall && cp -rn /tmp/tc/* /tmp/tc30/* /tmp/tcall/ 2>/dev/null; export TRITON_CACHE_DIR=/tmp/tcall
cat .device/warm30/inductor-30b-fp8-latency.bin.part-* > /tmp/ind30.bin
date -u
timeout 150 python3 -m pytest -m gpu -q -x tests/ops/test_moe_skinny.py tests/ops/test_linear_ops.py > $OUT/gpu-tests.log 2>&1; tail -2 $OUT/gpu-tests.log
timeout 150 python3 .device/sweep_fma_mm.py > $OUT/sweep-mm.log 2>&1; tail -6 $OUT/sweep-mm.log
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 compile.cache_artifacts=/tmp/ind30.bin workload.repeats=2"
for on in True False; do
  date -u
  timeout 100 python3 -c "
import sys, json, nvllm.ops.skinny_matmul as m
if $on:
    for k, v in json.load(open('/tmp/best_mm.json')).items(): m.FMA_CONFIGS[eval(k)] = tuple(v)
print(m.FMA_CONFIGS)
from nvllm.cli import run; run(sys.argv[1:])" $M hydra.run.dir=/tmp/l-$on > $OUT/lat30-mm-$on.log 2>&1; echo "fma matmuls $on"; grep -E "Throughput|latency|Startup|^\{" $OUT/lat30-mm-$on.log | cut -c1-220
done
date -u
