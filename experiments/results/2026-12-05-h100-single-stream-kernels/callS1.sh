# Combine A/B: GPU tests, 30B fp8 single stream COMBINE_IN_KERNEL False/True (2 repeats), a kernel trace of the default; 30B inductor artifacts split back
set -u
source .device/prep.sh
for f in .device/warm/triton-cache-*.tar.xz; do xz -dc $f | tar x -C /tmp; done
mkdir -p /tmp/tcall && cp -rn /tmp/tc/* /tmp/tc30/* /tmp/tcall/ && export TRITON_CACHE_DIR=/tmp/tcall
date -u
timeout 80 python3 -m pytest -m gpu -q -x tests/attention/test_cascade_gpu.py -k "combine or decode_kernel_matches" > $OUT/gpu-tests.log 2>&1; tail -2 $OUT/gpu-tests.log
M="+experiment=latency model=qwen3-30b-a3b model.quantization=fp8 compile.max_capture_batch_size=4 compile.cache_artifacts=/tmp/ind30.bin"
for on in False True; do
  date -u
  timeout 170 python3 -c "import sys, nvllm.ops.paged_decode_attention as m; m.COMBINE_IN_KERNEL = $on; from nvllm.cli import run; run(sys.argv[1:])" $M workload.repeats=2 hydra.run.dir=/tmp/l-$on > $OUT/lat30-$on.log 2>&1; echo "combine $on"; grep -E "Throughput|latency|Startup" $OUT/lat30-$on.log | cut -c1-220
done
date -u
timeout 130 python3 -m nvllm.run $M workload.repeats=1 profile.enabled=true profile.torch_trace_steps=4 profile.torch_trace_start_step=60 hydra.run.dir=/tmp/t30 > $OUT/t30.log 2>&1; grep -E "Throughput|Startup" $OUT/t30.log | cut -c1-200
python3 -m experiments.studies.trace_kernels /tmp/t30/trace.json --top 30 > $OUT/t30-kernels.txt 2>&1; head -40 $OUT/t30-kernels.txt
xz -T4 -c /tmp/t30/trace.json > $OUT/t30-trace.json.xz
ls -la /tmp/ind30.bin; split -b 15M /tmp/ind30.bin $OUT/inductor-30b-fp8-latency.bin.part-
date -u
