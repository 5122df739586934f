# At 1904ad6. On an H200: the aim (the 30B bench at the defaults, nvllm's Qwen3-8B beside it),
# about 5 minutes. On any other GPU: the fp8 GEMM's GPU tests (the split reduction's among them), the 30B's
# q/k/v and o swept with the split in the grid, and the 30B bench at the defaults and with the printed
# CONFIGS entries, in one call, about 6 minutes.
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 185 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
  date -u
  timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
else
  timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/ops/test_fp8_gemm.py > $OUT/gpu-tests.log 2>&1; tail -2 $OUT/gpu-tests.log | cut -c1-300
  date -u
  timeout 100 python3 -m experiments.kernels.fp8_gemm_bench --model qwen3-30b-a3b --rows 32,64,128,192,256 > $OUT/gemm30.log 2>&1; grep -v -i warn $OUT/gemm30.log | cut -c1-300
  sed -n '/^CONFIGS entries:/,$p' $OUT/gemm30.log | tail -n +2 > $OUT/entries.txt
  date -u
  timeout 150 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
  date -u
  timeout 150 python3 -c "import sys
from nvllm.ops import fp8_gemm
from nvllm.ops.fp8_gemm import GemmConfig
fp8_gemm.CONFIGS.update(eval('{' + open('$OUT/entries.txt').read() + '}'))
print('CONFIGS', {shape: fp8_gemm.CONFIGS[shape] for shape in ((5120, 2048), (2048, 4096))})
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-split > $OUT/b30-split.log 2>&1; grep -E "CONFIGS|Repeat|Throughput|Startup|Error" $OUT/b30-split.log | cut -c1-600
fi
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
