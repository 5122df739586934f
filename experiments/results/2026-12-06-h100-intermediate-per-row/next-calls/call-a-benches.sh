# The aim's number on an H200 and the pairs' outputs in bf16 against fp32, one call (about 9 minutes):
# the 30B bench (fp8 experts, fp8 cache, fp8 activations for prefill) at the defaults, then with
# moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE set at start-up; nvllm's Qwen3-8B bench beside them.
# carry: .device/wheels .device/fa2.tar.xz .device/prep.sh (this script as .device/call-a.sh)
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 190 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30.log | cut -c1-250
date -u
timeout 190 python3 -c "import sys
from nvllm.ops import moe_tiles
moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE = True
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-pairs-bf16 > $OUT/b30-pairs-bf16.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-pairs-bf16.log | cut -c1-250
date -u
timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
