source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
( PYTHONPATH=$PWD python3 .device/peer/make_checkpoint.py 8b /tmp/ck/ckpt-8b .device/peer/qtok > $OUT/r/ck8.txt 2>&1; echo ck8 done ) &
t "0.6b bench A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="bench" ENGINES="late before nanovllm" TMO=90 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-bench.txt
wait; t "8b bench A/B"; SIZE=8b ROUNDS=1 WORKLOADS="bench" ENGINES="late before nanovllm" TMO=150 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-8b-bench.txt
for tree in late before; do
( cd .device/$tree; export PYTHONPATH=$PWD/../fa2:$PWD
t "$tree profiled 0.6b single"; timeout 90 python3 -m nvllm.run +experiment=latency profile.enabled=true profile.torch_trace_steps=2 profile.torch_trace_start_step=100 hydra.run.dir=/tmp/r/l-$tree > $OUT/r/l-$tree.log 2>&1; grep -E "tok/s|p50" $OUT/r/l-$tree.log | head -5
[ -f /tmp/r/l-$tree/trace.json ] && python3 -m experiments.trace_kernels /tmp/r/l-$tree/trace.json --top 25 > $OUT/r/kernels-l-$tree.txt 2>&1; head -14 $OUT/r/kernels-l-$tree.txt )
done
t done
