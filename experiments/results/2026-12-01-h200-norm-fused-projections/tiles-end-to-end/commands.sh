source .device/setup.sh
mkdir -p $OUT/r /tmp/ck
export CKPT_DIR=/tmp/ck
( PYTHONPATH="$PWD" python3 .device/peer/make_checkpoint.py 8b /tmp/ck/ckpt-8b .device/peer/qtok > /tmp/ck/make8b.log 2>&1 ) &
( cd .device/tiles; export PYTHONPATH=$PWD/../fa2:$PWD
t "row-tiles gpu tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_linear_ops.py tests/test_gpu.py 2>&1 | grep -v Warn | tail -6 | tee $OUT/r/tiles-tests.txt )
t "0.6b A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="single bench" ENGINES="nanovllm before tiles" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b.txt
wait; t "8b single A/B"; SIZE=8b ROUNDS=1 WORKLOADS="single" ENGINES="tiles before nanovllm" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-8b.txt
t done
