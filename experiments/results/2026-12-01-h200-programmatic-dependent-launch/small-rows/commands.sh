source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
( cd .device/small; export PYTHONPATH=$PWD/../fa2:$PWD
  t "small tests"; timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_pdl.py 2>&1 | tail -1 | tee $OUT/r/small-tests.txt )
t "0.6b bench A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="bench" ENGINES="small before late refnorm nanovllm" TMO=70 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-bench.txt
t "0.6b single A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="single" ENGINES="small nanovllm before refnorm" TMO=70 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-single.txt
t done
