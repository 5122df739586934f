set -u
source .device/prep.sh
date -u
timeout 400 python3 .device/probe_swap.py 64,256,512 2>&1 | grep -v -i warn | tail -40
date -u
