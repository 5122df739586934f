# FMA experts loading all at once: GPU tests, compare + sweep (best to /tmp/best.json), engine A/B with the best
set -u
source .device/prep.sh
for f in .device/warm/triton-cache-*.tar.xz; do xz -dc $f | tar x -C /tmp; done
mkdir -p /tmp/tcall && cp -rn /tmp/tc/* /tmp/tc30/* /tmp/tcall/ 2>/dev/null; export TRITON_CACHE_DIR=/tmp/tcall
cat .device/warm30/inductor-30b-fp8-latency.bin.part-* > /tmp/ind30.bin
date -u
timeout 100 python3 -m pytest -m gpu -q -x tests/ops/test_moe_skinny.py > $OUT/gpu-tests.log 2>&1; tail -2 $OUT/gpu-tests.log
timeout 200 python3 .device/sweep_fma.py > $OUT/sweep.log 2>&1; grep -v "^FMA_" $OUT/sweep.log | tail -8; grep "^FMA_.*= " $OUT/sweep.log; cat /tmp/best.json
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 compile.cache_artifacts=/tmp/ind30.bin workload.repeats=2"
for on in True False; do
  date -u
  timeout 110 python3 -c "
import sys, json, nvllm.ops.moe_skinny_triton as m
m.ON_CUDA_CORES[1] = $on
for k, v in json.load(open('/tmp/best.json')).items(): getattr(m, k)[1] = tuple(v)
from nvllm.cli import run; run(sys.argv[1:])" $M hydra.run.dir=/tmp/l-$on > $OUT/lat30-cores-$on.log 2>&1; echo "on cuda cores $on"; grep -E "Throughput|latency|Startup" $OUT/lat30-cores-$on.log | cut -c1-220
done
date -u
