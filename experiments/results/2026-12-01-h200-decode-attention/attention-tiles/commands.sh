# Run `attention-tiles`: the decode attention kernel's tile / warps / stages, and longest-first rows (probe).
source .device/setup.sh
mkdir -p $OUT/r
t "attn probe"; ( cd .device && timeout 400 python3 attn_probe.py > $OUT/r/attn-probe.txt 2>&1 ); cat $OUT/r/attn-probe.txt
t done
