# Run `l2-prefetch`: L2 prefetch of the next matmul's weight during a latency-bound kernel (probe).
source .device/setup.sh
mkdir -p $OUT/r
t "l2 probe"; ( cd .device && timeout 200 python3 l2_probe.py > $OUT/r/l2-probe.txt 2>&1 ); cat $OUT/r/l2-probe.txt
t done
