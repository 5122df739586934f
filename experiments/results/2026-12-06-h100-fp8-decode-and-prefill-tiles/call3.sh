# Prefill's matmuls on fp8 activations (a scale a row, sums unpromoted) at 64-pair tiles (the engine's) and
# at 128-pair tiles, each swept over its launch shapes at 2,048, 8,192 and 16,384 tokens. 128-pair tiles
# were slower when each slice's sums were promoted (2026-12-05-h100-fp16-rows-and-prefill-tiles.md). They
# halve the weight tiles read per pair, and compile without spills (228 registers a thread for gate/up at
# (128, 128, 8, 4), 191 for down; CPU, `fp8_weights_sass`' builder). At 2,048 tokens (128 pairs an expert)
# they pad more. About 9 minutes. If 128 wins at some token counts: a band of its own in
# `moe_tiles.row_tile` for them, then the bench.
# carry: .device/wheels .device/fa2.tar.xz .device/prep.sh (this script as .device/call-j.sh)
set -u
source .device/prep.sh
date -u
S="python3 -m experiments.kernels.moe_tile_sweep --fp8 --fp8-activations --intermediate-per-row --jobs 15 --tokens 2048,8192,16384"
timeout 260 $S > $OUT/sweep-prefill-tile-64.log 2>&1; grep -E "tokens|band" $OUT/sweep-prefill-tile-64.log | cut -c1-220
date -u
timeout 260 $S --row-tile 128 > $OUT/sweep-prefill-tile-128.log 2>&1; grep -E "tokens|band" $OUT/sweep-prefill-tile-128.log | cut -c1-220
date -u
