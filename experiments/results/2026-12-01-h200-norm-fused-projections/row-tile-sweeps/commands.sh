source .device/setup.sh
mkdir -p $OUT/r
cd .device/normed; export PYTHONPATH=$PWD/../fa2:$PWD
export TRITON_CACHE_DIR=/tmp/tri-sweep
( for s in one-row tall gated; do t "compile $s"; timeout 150 python3 -m experiments.skinny_matmul_bench --$s --jobs 6 --compile-only 2>&1 | grep -v Warn | tail -5; done; t "compiled" ) > $OUT/r/compile.txt 2>&1 &
t "normed-branch gpu tests"; TRITON_CACHE_DIR=/tmp/tri-tests timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_linear_ops.py tests/test_gpu_cascade.py tests/test_gpu.py 2>&1 | tail -15 | tee $OUT/r/normed-tests.txt
t "waiting for compiles"; wait; cat $OUT/r/compile.txt
t "one-row sweep"; timeout 90 python3 -m experiments.skinny_matmul_bench --one-row 2>&1 | grep -v Warn | tee $OUT/r/one-row.txt
t "tall sweep"; timeout 100 python3 -m experiments.skinny_matmul_bench --tall 2>&1 | grep -v Warn | tee $OUT/r/tall.txt
t "gated sweep"; timeout 60 python3 -m experiments.skinny_matmul_bench --gated 2>&1 | grep -v Warn | tee $OUT/r/gated.txt
t done
