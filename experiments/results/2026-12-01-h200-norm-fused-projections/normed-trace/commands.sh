source .device/setup.sh
mkdir -p $OUT/r
for tree in normed before; do
( cd .device/$tree; export PYTHONPATH=$PWD/../fa2:$PWD
t "$tree profiled 0.6b single"; timeout 110 python3 -m nvllm.run +experiment=latency profile.enabled=true profile.torch_trace_steps=2 profile.torch_trace_start_step=100 hydra.run.dir=/tmp/r/l-$tree > $OUT/r/l-$tree.log 2>&1; grep -E "tok/s|p50" $OUT/r/l-$tree.log | head -5
[ -f /tmp/r/l-$tree/trace.json ] && python3 -m experiments.trace_kernels /tmp/r/l-$tree/trace.json --top 40 > $OUT/r/kernels-l-$tree.txt 2>&1; head -45 $OUT/r/kernels-l-$tree.txt )
done
( cd .device/normed; export PYTHONPATH=$PWD/../fa2:$PWD; t "normed bench"; timeout 100 python3 ../normed_bench.py 2>&1 | grep -v Warn | tee $OUT/r/normed-bench.txt )
t done
