# The sort by expert in chunks against one launch, and the pairs' sum from bf16 pairs (probe_align.py);
# the 30B bench at the defaults (sums unpromoted, the sort in chunks from 4,096 pairs) and with the pairs'
# outputs in bf16; then the GPU tests of fp8 activations (promoted and not) and of the pairs in bf16.
set -u
source .device/prep.sh
date -u
timeout 60 python3 .device/probe_align.py > $OUT/probe-align.log 2>&1; grep -v -i warn $OUT/probe-align.log | tail -10
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 185 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
date -u
timeout 185 python3 -c "import sys
from nvllm.ops import moe_tiles
moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE = True
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-pairs-bf16 > $OUT/b30-pairs-bf16.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-pairs-bf16.log | cut -c1-250
date -u
timeout 140 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "within_bf16_noise or fp8_activations_equal" > $OUT/gpu-tests.log 2>&1; tail -4 $OUT/gpu-tests.log
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
