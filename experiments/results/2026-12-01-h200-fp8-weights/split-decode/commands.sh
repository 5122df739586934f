# Run `split-decode`: split decode (two halves on two streams) A/B on the 0.6B and 8B bench; GPU tests.
source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
( PYTHONPATH=$PWD python3 .device/peer/make_checkpoint.py 8b /tmp/ck/ckpt-8b .device/peer/qtok > $OUT/r/ck8.txt 2>&1 ) &
t "0.6b bench A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="bench" ENGINES="now now@compile__split_decode_rows=64 now@compile__split_decode_rows=192 nanovllm" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-bench.txt
wait
t "8b bench A/B"; SIZE=8b ROUNDS=1 WORKLOADS="bench" ENGINES="now now@compile__split_decode_rows=64" TMO=130 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-8b-bench.txt
t "gpu tests"; timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_fp8.py -x > $OUT/r/gpu-tests.txt 2>&1; tail -5 $OUT/r/gpu-tests.txt; grep -E "^E " $OUT/r/gpu-tests.txt | head -20
t done
