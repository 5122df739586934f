# Call a: GPU tests of the new kernels and the engine, then the skinny-matmul benches.
source .device/setup.sh
mkdir -p $OUT/r
t "gpu tests"; timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_linear_ops.py tests/test_qk_norm_rope_store.py tests/test_attention_ops.py tests/test_gpu.py 2>&1 | tail -25 | tee $OUT/r/gpu-tests.txt
t "gated bench"; timeout 90 python3 -m experiments.skinny_matmul_bench --gated 2>&1 | grep -v Warn | tee $OUT/r/gated-bench.txt
t "plain bench"; timeout 220 python3 -m experiments.skinny_matmul_bench 2>&1 | grep -v Warn | tee $OUT/r/skinny-bench.txt
t done
