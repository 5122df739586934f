# Run `split-decode-again`: split decode on the 0.6B bench (2 rounds), a traced 0.6B bench round's kernels, FP8
# accuracy against float32 (with bf16's own), the skinny kernel on fp8 weights.
source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
t "0.6b bench A/B"; SIZE=0.6b ROUNDS=2 WORKLOADS="bench" ENGINES="now now@compile__split_decode_rows=64" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-bench.txt
t "0.6b profile"; timeout 90 python3 -m nvllm.run +experiment=profile hydra.run.dir=/tmp/r/p06 > $OUT/r/p06.log 2>&1; cp /tmp/r/p06/profile.txt $OUT/r/ 2>/dev/null
[ -f /tmp/r/p06/trace.json ] && timeout 60 python3 -m experiments.trace_kernels /tmp/r/p06/trace.json --top 30 > $OUT/r/kernels-p06.txt 2>&1; head -45 $OUT/r/kernels-p06.txt
t "fp8 accuracy"; timeout 200 python3 -m experiments.fp8_accuracy --model qwen3-8b --prompts 16 --new 128 > $OUT/r/fp8-accuracy.txt 2>&1; tail -8 $OUT/r/fp8-accuracy.txt
t "skinny fp8"; timeout 130 python3 -m experiments.skinny_matmul_bench --fp8 --jobs 12 > $OUT/r/skinny-fp8.txt 2>&1; tail -20 $OUT/r/skinny-fp8.txt
t done
