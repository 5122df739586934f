# Third call (~8 min; carry as callNext.sh, with callNext3.sh and .device/fp8a_tables/, the four tables calls 1 and
# 2 cut from their sweeps): the 30B bench, three repeats each, one machine. bf16 activations (the default); fp8
# activations from 1,024 tokens on the swept tables; fp8 activations from 3 tokens on them. DECODE_ROWS (16 or
# 32) and PREFILL_ROWS (64 or 128): the row tiles that calls 1 and 2 timed faster, the bands at most 16 pairs an
# expert and more than 64 taking the table swept at that tile, the band between call 1's
set -u
DECODE_ROWS=${DECODE_ROWS:-16}
PREFILL_ROWS=${PREFILL_ROWS:-128}
FP16_GATE_UP=${FP16_GATE_UP:-True}  # the default since 6f320b7; False: gate/up moves bits to bf16
source .device/prep.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3"
SWEPT="import sys, nvllm.ops.moe_tiles as t, nvllm.ops.moe_ops as o, nvllm.ops.moe_triton as m
m.GATE_UP_IN_FP16 = $FP16_GATE_UP
def table(name):
    found = {}
    exec(open(f'.device/fp8a_tables/fp8a_table_{name}.py').read(), vars(t), found)
    return found['FP8_ACTIVATION_TILE_CONFIGS']
small, middle, prefill = table('decode_$DECODE_ROWS'), table('decode_16'), table('prefill_$PREFILL_ROWS')
t.FP8_ACTIVATION_TILE_CONFIGS = small[:3] + middle[3:4] + prefill[4:]
t.FP8_ACTIVATION_ROW_TILES = ($DECODE_ROWS, 32, $PREFILL_ROWS)
print('tables:', t.FP8_ACTIVATION_TILE_CONFIGS, t.FP8_ACTIVATION_ROW_TILES, m.GATE_UP_IN_FP16, flush=True)"
date -u
timeout 170 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30-bf16a > $OUT/b30-bf16a.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-bf16a.log | cut -c1-250
date -u
timeout 170 python3 -c "$SWEPT
from nvllm.cli import run; run(sys.argv[1:])" $B model.fp8_activations=true hydra.run.dir=$OUT/b30-fp8a > $OUT/b30-fp8a.log 2>&1; grep -E "tables|Repeat|Throughput|Startup" $OUT/b30-fp8a.log | cut -c1-500
date -u
timeout 170 python3 -c "$SWEPT
o.FP8_ACTIVATIONS_MIN_TOKENS = 3  # every batch but the skinny experts' (at most 2 tokens of fp8 experts)
from nvllm.cli import run; run(sys.argv[1:])" $B model.fp8_activations=true hydra.run.dir=$OUT/b30-fp8a-all > $OUT/b30-fp8a-all.log 2>&1; grep -E "Repeat|Throughput|Startup" $OUT/b30-fp8a-all.log | cut -c1-250
date -u
find $OUT -name "*.json*" -size +15M -delete
