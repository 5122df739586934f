source .device/setup.sh
mkdir -p $OUT/r
( cd .device/normed; export PYTHONPATH=$PWD/../fa2:$PWD
t "normed-branch gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_linear_ops.py tests/test_gpu.py 2>&1 | grep -v Warn | tail -6 | tee $OUT/r/normed-tests.txt )
t "0.6b A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="single bench" ENGINES="nanovllm before normed" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b.txt
t done
