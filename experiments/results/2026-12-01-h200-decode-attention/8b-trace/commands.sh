# Run `8b-trace`: the 8B bench traced at full batch (kernels), and a tiled Triton matmul (pointer loads,
# TMA) against cuBLAS at 64-256 rows on the 8B's shapes.
source .device/setup.sh
mkdir -p $OUT/r
( cd .device && timeout 150 python3 tall_probe.py compile 12 > $OUT/r/tall-compile.txt 2>&1 ) &
t "8b bench profiled"; timeout 240 python3 -m nvllm.run +experiment=profile model=qwen3-8b profile.torch_trace_start_step=40 hydra.run.dir=/tmp/r/p8 > $OUT/r/p8.log 2>&1; tail -25 $OUT/r/p8.log
cp /tmp/r/p8/profile.txt $OUT/r/p8-profile.txt 2>/dev/null; cp /tmp/r/p8/steps.csv $OUT/r/p8-steps.csv 2>/dev/null
[ -f /tmp/r/p8/trace.json ] && timeout 90 python3 -m experiments.trace_kernels /tmp/r/p8/trace.json --top 30 > $OUT/r/kernels-p8.txt 2>&1; head -35 $OUT/r/kernels-p8.txt
wait; t "compiled"; cat $OUT/r/tall-compile.txt
t "tall probe"; ( cd .device && PYTHONPATH=$PYTHONPATH:$PWD timeout 280 python3 tall_probe.py > $OUT/r/tall-probe.txt 2>&1 ); cat $OUT/r/tall-probe.txt
t done
