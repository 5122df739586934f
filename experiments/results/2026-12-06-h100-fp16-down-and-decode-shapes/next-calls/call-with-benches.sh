# tree: FP8_INTERMEDIATE_PER_ROW (off) built; the fp8-activation GPU tests in both modes; the prefill layer's
# probe over the intermediate's scales; the 30B bench (fp8 activations) at the defaults and at the probe's best
set -u
source .device/prep.sh
date -u
timeout 90 python3 -m pytest -m gpu -q tests/models/test_qwen3_moe_gpu.py -k "fp8_activations_equal" > $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
date -u
timeout 150 python3 .device/probe_prefill.py > $OUT/probe-prefill.log 2>&1; cat $OUT/probe-prefill.log | cut -c1-250
BEST=$(grep "^BEST" $OUT/probe-prefill.log | cut -d' ' -f2); BEST=${BEST:-0}
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
date -u
if [ "$BEST" != "0" ]; then
timeout 170 python3 -c "import sys; sys.path.insert(0, '.device')
import probe_prefill as p
p.setup(*p.VARIANTS[$BEST][1:])
from nvllm.ops import moe_tiles as t
print('variant', p.VARIANTS[$BEST], t.FP8_INTERMEDIATE_PER_ROW, t.FP8_INTERMEDIATE_GROUP, t.FP8_ACTIVATION_TILE_CONFIGS[-1], flush=True)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-best > $OUT/b30-best.log 2>&1; grep -E "variant|Repeat|Throughput|Startup|Error" $OUT/b30-best.log | cut -c1-400
date -u
fi
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30-defaults > $OUT/b30-defaults.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-defaults.log | cut -c1-250
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
