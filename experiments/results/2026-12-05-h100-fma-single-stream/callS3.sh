# FMA skinny experts: GPU tests, engine A/B (30B fp8 single stream, ON_CUDA_CORES True/False), then the ways compare + launch sweep
set -u
source .device/prep.sh
for f in .device/warm/triton-cache-*.tar.xz; do xz -dc $f | tar x -C /tmp; done
mkdir -p /tmp/tcall && cp -rn /tmp/tc/* /tmp/tc30/* /tmp/tcall/ 2>/dev/null; export TRITON_CACHE_DIR=/tmp/tcall
cat .device/warm30/inductor-30b-fp8-latency.bin.part-* > /tmp/ind30.bin
date -u
timeout 100 python3 -m pytest -m gpu -q -x tests/ops/test_moe_skinny.py > $OUT/gpu-tests.log 2>&1; tail -2 $OUT/gpu-tests.log
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 compile.cache_artifacts=/tmp/ind30.bin workload.repeats=2"
for on in True False; do
  date -u
  timeout 120 python3 -c "import sys, nvllm.ops.moe_skinny_triton as m; m.ON_CUDA_CORES[1] = $on; from nvllm.cli import run; run(sys.argv[1:])" $M hydra.run.dir=/tmp/l-$on > $OUT/lat30-cores-$on.log 2>&1; echo "on cuda cores $on"; grep -E "Throughput|latency|Startup" $OUT/lat30-cores-$on.log | cut -c1-220
done
date -u
timeout 280 python3 -c "
import torch
from experiments.kernels import moe_bench as b
torch.manual_seed(0)
gate_up, down, *scales = b.layer_experts(True)
b.compare_skinny_ways(gate_up, down, scales)
b.sweep_skinny_launches(gate_up, down, scales)
" > $OUT/sweep.log 2>&1; grep -v "^FMA_" $OUT/sweep.log | tail -8; grep "^FMA_.*= " $OUT/sweep.log
date -u
