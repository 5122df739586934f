# tree c9a9585 + probe_per_row.py (the intermediate a scale a row, the table's prefill band at gate/up
# (64, 128, 4, 3), down (128, 128, 4, 4)); one warm H100, three calls
# call3
source .device/prep.sh >/dev/null 2>&1; timeout 165 python3 .device/probe_per_row.py 2>&1 | tee $OUT/probe-per-row.log
# call4
source .device/prep.sh >/dev/null 2>&1; timeout 100 python3 -c "
import sys; sys.path.insert(0, '.device')
import itertools, probe_per_row as p
from nvllm.ops.moe_tiles import GroupedMatmulConfig as C
g = [C(64, 128, 4, 3), C(128, 128, 8, 3), C(128, 128, 8, 4)]
d = [C(128, 128, 4, 4), C(128, 128, 8, 4), C(256, 128, 8, 4)]
p.VARIANTS = list(itertools.product(g, d)) * 2
p.main()" 2>&1 | tee $OUT/probe-per-row-combos.log
# call5
source .device/prep.sh >/dev/null 2>&1; timeout 100 python3 -c "
import sys; sys.path.insert(0, '.device')
import probe_per_row as p
from nvllm.ops.moe_tiles import GroupedMatmulConfig as C
p.TOKENS = (2048, 8192, 16384)
g = [C(128, 128, 8, 4), C(128, 128, 8, 5), C(256, 128, 8, 3), C(256, 128, 8, 4), C(128, 256, 8, 3), C(64, 128, 8, 5), C(64, 128, 4, 3)]
d = C(128, 128, 8, 4)
p.VARIANTS = [(x, d) for x in g] + [(C(64, 128, 4, 3), C(128, 128, 4, 4))]
p.main()" 2>&1 | tee $OUT/probe-per-row-gate-up.log
