# routed in the kernels (model.moe_routing_kernel=true) vs inductor's routing, with FMA experts + FMA router (defaults)
set -u
source .device/prep.sh
for f in .device/warm/triton-cache-*.tar.xz; do xz -dc $f | tar x -C /tmp; done
mkdir -p /tmp/tcall && cp -rn /tmp/tc/* /tmp/tc30/* /tmp/tcall/ 2>/dev/null; export TRITON_CACHE_DIR=/tmp/tcall
cat .device/warm30/inductor-30b-fp8-latency.bin.part-* > /tmp/ind30.bin
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 compile.cache_artifacts=/tmp/ind30.bin workload.repeats=2"
for rk in false true; do
  date -u
  timeout 130 python3 -m nvllm.run $M model.moe_routing_kernel=$rk hydra.run.dir=/tmp/l-$rk > $OUT/lat30-routing-kernel-$rk.log 2>&1; echo "routing kernel $rk"; grep -E "Throughput|latency|Startup" $OUT/lat30-routing-kernel-$rk.log | cut -c1-220
done
date -u
