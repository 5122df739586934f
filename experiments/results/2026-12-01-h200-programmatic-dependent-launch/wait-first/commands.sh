source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
( PYTHONPATH=$PWD python3 .device/peer/make_checkpoint.py 8b /tmp/ck/ckpt-8b .device/peer/qtok > $OUT/r/ck8.txt 2>&1; echo ck8 done ) &
for v in wf late; do ( cd .device/$v; export PYTHONPATH=$PWD/../fa2:$PWD
  t "$v tests"; timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_pdl.py 2>&1 | tail -2 | tee $OUT/r/$v-tests.txt ); done
t "0.6b single A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="single" ENGINES="before wf late nanovllm" TMO=90 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-single.txt
wait; t "8b single A/B"; SIZE=8b ROUNDS=1 WORKLOADS="single" ENGINES="late before wf" TMO=120 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-8b-single.txt
t done
