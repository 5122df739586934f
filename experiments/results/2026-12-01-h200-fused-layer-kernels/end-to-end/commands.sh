source .device/setup.sh
mkdir -p $OUT/r; export CKPT_DIR=/tmp/ab; mkdir -p $CKPT_DIR
t "linear tests"; timeout 45 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_linear_ops.py 2>&1 | tail -3 | tee $OUT/r/linear-tests.txt
t "0.6b"; SIZE=0.6b ROUNDS=1 WORKLOADS="single bench" ENGINES="nanovllm before now" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/peer-0.6b.txt
t "8b"; SIZE=8b ROUNDS=1 WORKLOADS="single" ENGINES="before now nanovllm" TMO=110 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/peer-8b.txt
t done
