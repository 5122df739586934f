# 30B fp8 bench: today's tables against 32-row tiles above 8 pairs an expert (same call); the fp8 experts' tile sweep at 16- and 32-row tiles
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=1"
timeout 110 python3 -m nvllm.run $B hydra.run.dir=/tmp/b0 > $OUT/b30-base.log 2>&1; grep -E "tok/s" $OUT/b30-base.log | tail -1 | cut -c1-250
date -u
timeout 110 python3 .device/tiles32.py 8 $B hydra.run.dir=/tmp/b1 > $OUT/b30-tiles32.log 2>&1; grep -E "tables|tok/s" $OUT/b30-tiles32.log | tail -2 | cut -c1-250
date -u
timeout 120 python3 -m experiments.kernels.moe_tile_sweep --fp8 --move-bits --tokens 128,192,256 --jobs 6 > $OUT/sweep16.log 2>&1; grep -E "tokens|band" $OUT/sweep16.log | cut -c1-200
date -u
timeout 120 python3 -m experiments.kernels.moe_tile_sweep --fp8 --move-bits --tokens 128,192,256 --jobs 6 --row-tile 32 > $OUT/sweep32.log 2>&1; grep -E "tokens|band" $OUT/sweep32.log | cut -c1-200
date -u
