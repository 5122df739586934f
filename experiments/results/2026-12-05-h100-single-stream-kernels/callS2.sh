# ncu of the fp8 single stream's skinny kernels (experts at 1 token + padding, q/k/v and o at 2 rows)
set -u
source .device/prep.sh
export TRITON_CACHE_DIR=/tmp/tcn
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
python3 .device/ncu_experts.py
date -u
timeout 400 $NCU --clock-control none --set full -k regex:"skinny" -c 12 -o $OUT/skinny python3 .device/ncu_experts.py > $OUT/ncu.log 2>&1; tail -5 $OUT/ncu.log
$NCU -i $OUT/skinny.ncu-rep --page details > $OUT/ncu-details.txt 2>&1; wc -l $OUT/ncu-details.txt
date -u
