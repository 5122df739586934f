# same machine as call1 and call3: fp8 experts' launch shapes at decode batches with gate/up on fp16 rows (the
# default); the 30B bench (fp8 activations for prefill) with the swept gate/up column for 16-512 tokens
set -u
source .device/prep.sh
mkdir -p .device/tables
date -u
timeout 200 python3 -m experiments.kernels.moe_tile_sweep --fp8 --move-bits --jobs 12 --tokens 16,32,64,128,256,512 > $OUT/sweep-fp8-fp16rows.log 2>&1; grep -E "tokens|band" $OUT/sweep-fp8-fp16rows.log | cut -c1-200
sed -n '/^FP8_TILE_CONFIGS/,/^)/p' $OUT/sweep-fp8-fp16rows.log > .device/tables/fp8.py; cp .device/tables/fp8.py $OUT/
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
date -u
timeout 190 python3 -c "import sys, nvllm.ops.moe_tiles as t
found = {}
exec(open('.device/tables/fp8.py').read(), vars(t), found)
new = found['FP8_TILE_CONFIGS']
t.FP8_TILE_CONFIGS = t.FP8_TILE_CONFIGS[:1] + tuple((b, g, d) for (b, g, _), (_, _, d) in zip(new[1:4], t.FP8_TILE_CONFIGS[1:4])) + t.FP8_TILE_CONFIGS[4:]
print('tables:', t.FP8_TILE_CONFIGS, flush=True)
from nvllm.cli import run; run(sys.argv[1:])" $B hydra.run.dir=$OUT/b30-swept > $OUT/b30-swept.log 2>&1; grep -E "tables|Repeat|Throughput|Startup|Error" $OUT/b30-swept.log | cut -c1-600
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
