# Run `long-tile-0.6b`: decode attention's long tile (128 KV tokens an iteration for one-split steps of >= 128
# rows): the 0.6B bench A/B beside nano-vllm, the kernel's GPU tests, the decode attention bench.
source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
t "0.6b bench A/B"; SIZE=0.6b ROUNDS=1 WORKLOADS="bench" ENGINES="before now nanovllm before now" TMO=100 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-0.6b-bench.txt
t "gpu tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_cascade.py tests/test_pdl.py > $OUT/r/gpu-tests.txt 2>&1; tail -4 $OUT/r/gpu-tests.txt; grep -E "^E " $OUT/r/gpu-tests.txt | head -10
t "attention bench"; timeout 140 python3 -m experiments.decode_attention_bench --rows 64,128,256 > $OUT/r/decode-attention-bench.txt 2>&1; sed 's/flash-attn.*| best/| best/' $OUT/r/decode-attention-bench.txt
t done
