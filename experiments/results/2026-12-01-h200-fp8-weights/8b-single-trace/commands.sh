# Run `8b-single-trace`: the 8B single stream traced with PDL (kernels and idle), the skinny kernel's wide grid on
# the 8B's decoder shapes in bf16 and fp8.
source .device/setup.sh
mkdir -p $OUT/r
( timeout 100 python3 -m experiments.skinny_matmul_bench --wide --model qwen3-8b --jobs 10 --compile-only > $OUT/r/compile-bf16.txt 2>&1
  timeout 100 python3 -m experiments.skinny_matmul_bench --wide --fp8 --model qwen3-8b --jobs 10 --compile-only > $OUT/r/compile-fp8.txt 2>&1 ) &
t "8b profiled single"; timeout 130 python3 -m nvllm.run +experiment=latency model=qwen3-8b profile.enabled=true profile.torch_trace_steps=2 profile.torch_trace_start_step=100 hydra.run.dir=/tmp/r/l8 > $OUT/r/l8.log 2>&1; grep -E "tok/s|p50" $OUT/r/l8.log | head -3
[ -f /tmp/r/l8/trace.json ] && timeout 60 python3 -m experiments.trace_kernels /tmp/r/l8/trace.json --top 25 > $OUT/r/kernels-l8.txt 2>&1; head -30 $OUT/r/kernels-l8.txt
wait; t "compiled"
t "wide bf16"; timeout 100 python3 -m experiments.skinny_matmul_bench --wide --model qwen3-8b > $OUT/r/wide-bf16.txt 2>&1; tail -5 $OUT/r/wide-bf16.txt
t "wide fp8"; timeout 100 python3 -m experiments.skinny_matmul_bench --wide --fp8 --model qwen3-8b > $OUT/r/wide-fp8.txt 2>&1; tail -5 $OUT/r/wide-fp8.txt
t done
