# tree 03d3447 (code of b3d44cd): the 30B bench (fp8 experts, fp8 cache, fp8 activations for prefill) at the
# defaults, then with the intermediate a scale a row at the probe's best prefill shape (variant 7 of
# probe_prefill.py, set at start-up); nvllm's Qwen3-8B bench beside them
set -u
source .device/prep.sh
date -u
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
timeout 190 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30-defaults > $OUT/b30-defaults.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-defaults.log | cut -c1-250
date -u
timeout 190 python3 -c "import sys; sys.path.insert(0, '.device')
import probe_prefill as p
p.setup(*p.VARIANTS[7][1:])
from nvllm.ops import moe_tiles as t
print('variant', p.VARIANTS[7], t.FP8_INTERMEDIATE_PER_ROW, t.FP8_INTERMEDIATE_GROUP, t.FP8_ACTIVATION_TILE_CONFIGS[-1], flush=True)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-rows > $OUT/b30-rows.log 2>&1; grep -E "variant|Repeat|Throughput|Startup|Error" $OUT/b30-rows.log | cut -c1-400
date -u
timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
