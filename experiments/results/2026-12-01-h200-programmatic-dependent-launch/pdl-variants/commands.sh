source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
( cd .device/pdl; export PYTHONPATH=$PWD/../fa2:$PWD
  t "pdl tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_pdl.py tests/test_norm_ops.py tests/test_gpu.py 2>&1 | grep -v Warn | tail -8 | tee $OUT/r/pdl-tests.txt )
( cd .device/both; export PYTHONPATH=$PWD/../fa2:$PWD
  t "normed kernel bench"; timeout 60 python3 -m experiments.normed_matmul_bench 2>&1 | grep -v Warn | tee $OUT/r/normed-bench.txt
  t "normed tests"; timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_linear_ops.py -k "norm" tests/test_pdl.py 2>&1 | tail -3 | tee $OUT/r/normed-tests.txt )
( cd .device/pf; export PYTHONPATH=$PWD/../fa2:$PWD
  t "prefetch tests"; timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_pdl.py 2>&1 | tail -2 | tee $OUT/r/pf-tests.txt )
t "0.6b single A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="single" ENGINES="nanovllm before pdl pf both" TMO=90 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-single.txt
t done
