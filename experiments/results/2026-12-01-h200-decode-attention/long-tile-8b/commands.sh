# Run `long-tile-8b`: the long decode tile on the 8B bench, beside nano-vllm (before = b80c9a2).
source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
t "8b bench A/B"; SIZE=8b ROUNDS=1 WORKLOADS="bench" ENGINES="before now nanovllm" TMO=170 bash .device/compare_ab.sh 2>&1 | tee $OUT/r/ab-8b-bench.txt
t done
