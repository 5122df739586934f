# A/B on one warm machine: 30B fp8 single stream, defaults (down early loads on, prefetch 2 slices) vs down early loads off vs prefetch 8 slices; GPU tests first
set -u
source .device/prep.sh
for f in .device/warm/triton-cache-*.tar.xz; do xz -dc $f | tar x -C /tmp; done
mkdir -p /tmp/tcall && cp -rn /tmp/tc/* /tmp/tc30/* /tmp/tcall/ 2>/dev/null; export TRITON_CACHE_DIR=/tmp/tcall
cat .device/warm30/inductor-30b-fp8-latency.bin.part-* > /tmp/ind30.bin
date -u
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 compile.cache_artifacts=/tmp/ind30.bin workload.repeats=2"
i=0
for v in "early=True;slices=2" "early=False;slices=2" "early=True;slices=8"; do
  i=$((i+1))
  if [ $i = 2 ]; then timeout 45 python3 -m pytest -m gpu -q -x tests/ops/test_moe_skinny.py -k "True" > $OUT/gpu-tests.log 2>&1; tail -1 $OUT/gpu-tests.log; fi
  date -u
  timeout 70 python3 -c "
import sys, nvllm.ops.moe_skinny_triton as e, nvllm.ops.skinny_matmul as m
$v
e.DOWN_LOADS_EARLY = early; m.PREFETCHED_SLICES = slices
from nvllm.cli import run; run(sys.argv[1:])" $M hydra.run.dir=/tmp/l > $OUT/lat30-$i.log 2>&1; echo "$v"; grep -E "Throughput|latency" $OUT/lat30-$i.log | cut -c1-200
done
date -u
