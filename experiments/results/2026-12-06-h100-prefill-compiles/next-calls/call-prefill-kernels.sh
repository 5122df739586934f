# The probe of the prefill step's quantization and flash-attn (about 2 minutes on a warm machine).
# carry: .device/wheels .device/fa2.tar.xz .device/prep.sh
set -u
source .device/prep.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
date -u
timeout 240 python3 experiments/results/2026-12-06-h100-prefill-compiles/next-calls/probe_prefill_kernels.py 2>&1 | grep -v Warning | tail -30
date -u
