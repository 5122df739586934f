# Qwen3-30B-A3B's fp8 attention projections (q/k/v 5120x2048, o 2048x4096) at decode batches of 32-256 rows:
# cuBLAS (what they run above 64 rows, no table entry) against nvllm's fp8 Triton GEMM over its grid; then
# the 30B bench at the defaults and with the printed CONFIGS entries, in one call.
set -u
source .device/prep.sh
date -u
timeout 240 python3 -m experiments.kernels.fp8_gemm_bench --model qwen3-30b-a3b --rows 32,64,128,192,256 > $OUT/gemm30.log 2>&1; grep -v -i warn $OUT/gemm30.log | cut -c1-260
sed -n '/^CONFIGS entries:/,$p' $OUT/gemm30.log | tail -n +2 > $OUT/entries.txt
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 170 python3 -c "import sys
from nvllm.ops import fp8_gemm
from nvllm.ops.fp8_gemm import GemmConfig
fp8_gemm.CONFIGS.update(eval('{' + open('$OUT/entries.txt').read() + '}'))
print('CONFIGS', fp8_gemm.CONFIGS)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-gemm > $OUT/b30-gemm.log 2>&1; grep -E "CONFIGS|Repeat|Throughput|Startup|Error" $OUT/b30-gemm.log | cut -c1-400
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
