# The fp8-activation matmuls' sums promoted to fp32 each slice (the default) or accumulated in the tensor
# cores over the loop (moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32=False): the layer and its errors
# (probe_promotion.py), then the 30B bench at the defaults and with the sums not promoted. About 9 minutes.
set -u
source .device/prep.sh
date -u
timeout 150 python3 .device/probe_promotion.py > $OUT/probe-promotion.log 2>&1; grep -v -i warn $OUT/probe-promotion.log | tail -16
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 195 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30.log | cut -c1-250
date -u
timeout 195 python3 -c "import sys
from nvllm.ops import moe_tiles
moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32 = False
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-imprecise > $OUT/b30-imprecise.log 2>&1; grep -E "Repeat|Throughput|Startup|Error" $OUT/b30-imprecise.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
