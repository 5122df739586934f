# On an H200 only (it exits at once elsewhere), after the aim's call: the launch tables measured on H100s
# since the last H200 (the fp8 experts' decode bands on fp16 rows, the 30B's q/k/v and o on nvllm's fp8
# GEMM) swept again on the H200, then the 30B bench at the defaults and with both swept tables set at
# start-up, in one call. About 9 minutes. If it wins: paste the tables, run the fp8 experts' and the fp8
# GEMM's GPU tests.
# carry: .device/wheels .device/fa2.tar.xz .device/prep.sh (this script as .device/call-h200-tables.sh)
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { nvidia-smi --query-gpu=name --format=csv,noheader; exit 3; }
source .device/prep.sh
date -u
timeout 200 python3 -m experiments.kernels.moe_tile_sweep --fp8 --jobs 15 --tokens 16,32,64,128,256,512 > $OUT/sweep-decode.log 2>&1; grep -E "tokens|band" $OUT/sweep-decode.log | cut -c1-220
sed -n '/^FP8_TILE_CONFIGS/,/^)/p' $OUT/sweep-decode.log > $OUT/experts_table.py
date -u
timeout 100 python3 -m experiments.kernels.fp8_gemm_bench --model qwen3-30b-a3b --rows 32,64,128,192,256 > $OUT/gemm30.log 2>&1; grep -v -i warn $OUT/gemm30.log | cut -c1-300
sed -n '/^CONFIGS entries:/,$p' $OUT/gemm30.log | tail -n +2 > $OUT/gemm_entries.txt
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 170 python3 -c "import math, runpy, sys
from nvllm.ops import fp8_gemm, moe_tiles
from nvllm.ops.fp8_gemm import GemmConfig
namespace = runpy.run_path('$OUT/experts_table.py', init_globals={'GroupedMatmulConfig': moe_tiles.GroupedMatmulConfig, 'math': math})
moe_tiles.FP8_TILE_CONFIGS = namespace['FP8_TILE_CONFIGS']
fp8_gemm.CONFIGS.update(eval('{' + open('$OUT/gemm_entries.txt').read() + '}'))
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-swept > $OUT/b30-swept.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-swept.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
