# H200: 30B fp8 bench traced at decode steps; single-stream variants (skinny experts' conversion, routing first)
set -u
source .device/prep.sh > /dev/null 2>&1
date -u
timeout 200 python3 -m nvllm.run +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 model.fp8_activations=true workload.repeats=1 profile.enabled=true profile.torch_trace_steps=2 profile.torch_trace_start_step=300 hydra.run.dir=$OUT/b30t > $OUT/b30t.log 2>&1; grep -E "Throughput|Startup" $OUT/b30t.log | cut -c1-250
T=$(find $OUT/b30t -name "*trace*.json*" | head -1); echo "trace: $T"; [ -n "$T" ] && python3 -m experiments.studies.trace_kernels $T --top 40 > $OUT/b30-trace.txt 2>&1; head -60 $OUT/b30-trace.txt
find $OUT/b30t -name "*.json*" -size +15M -delete
date -u
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 workload.repeats=2"
for bits in True False; do
  timeout 80 python3 -c "
import sys, nvllm.ops.moe_skinny_triton as e
if not $bits: e.moves_bits = lambda weight, activations: False
from nvllm.cli import run; run(sys.argv[1:])" $M hydra.run.dir=/tmp/l-$bits > $OUT/lat30-experts-move-bits-$bits.log 2>&1; echo "experts move bits $bits"; grep -E "Throughput|latency" $OUT/lat30-experts-move-bits-$bits.log | cut -c1-200
done
date -u
timeout 80 python3 -c "
import sys, nvllm.ops.moe_route_triton as r
r.SKINNY_ROUTES_IN_KERNELS = False
from nvllm.cli import run; run(sys.argv[1:])" $M model.moe_routing_kernel=true hydra.run.dir=/tmp/l-rt > $OUT/lat30-route-tokens-first.log 2>&1; echo "route_tokens first"; grep -E "Throughput|latency" $OUT/lat30-route-tokens-first.log | cut -c1-200
date -u
