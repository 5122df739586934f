# Whether a full decode batch of nano-vllm's bench should cut its KV into splits (probe_attention_splits.py,
# copied to .device/). About 2 minutes. Decode attention was 16.6 % of an H200 decode step of 256 rows
# (2026-12-05-h200-moe-aims.md), at about half the DRAM's rate.
set -u
source .device/prep.sh
timeout 100 python3 .device/probe_attention_splits.py > $OUT/probe-attention-splits.log 2>&1; grep -v -i warn $OUT/probe-attention-splits.log | tail -5
