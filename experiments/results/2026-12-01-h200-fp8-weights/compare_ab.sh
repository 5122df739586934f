#!/usr/bin/env bash
# nano-vllm, nvllm before (.device/before = 3c7475e) and nvllm now, alternating, one checkpoint, one call.
# Env: SIZE, WORKLOADS, ROUNDS (2), ENGINES ("nanovllm before now"), EXTRA env passed through.
set -uo pipefail
w=${CKPT_DIR:-$(mktemp -d)}
[ -d .device/fa2 ] || tar xJf .device/fa2.tar.xz -C .device
export PYTHONUNBUFFERED=1 WANDB_MODE=offline TRANSFORMERS_VERBOSITY=error
[ -d "$w/ckpt-${SIZE:-0.6b}" ] || PYTHONPATH="$PWD" python3 .device/peer/make_checkpoint.py "${SIZE:-0.6b}" "$w/ckpt-${SIZE:-0.6b}" .device/peer/qtok >/dev/null
for r in $(seq ${ROUNDS:-2}); do
for wl in ${WORKLOADS:-bench single}; do
  for tok in ${ENGINES:-nanovllm before now}; do
    e=${tok%%@*}; kw=""; [ "$tok" != "$e" ] && kw=${tok#*@}
    case $e in
      nanovllm) pp="$PWD/.device/fa2:$PWD/.device/peer/nano-vllm"; eng=nanovllm;;
      before) pp="$PWD/.device/fa2:$PWD/.device/before"; eng=nvllm;;
      now) pp="$PWD/.device/fa2:$PWD"; eng=nvllm;;
      *) pp="$PWD/.device/fa2:$PWD/.device/$e"; eng=nvllm;;
    esac
    echo "== $tok $wl size=${SIZE:-0.6b} round=$r"
    TORCHINDUCTOR_CACHE_DIR=$w/ind-$e TRITON_CACHE_DIR=$w/tri-$e KW="$kw" PYTHONPATH="$pp" ENGINE=$eng MODEL="$w/ckpt-${SIZE:-0.6b}" timeout ${TMO:-300} python3 .device/peer/workloads.py "$wl" 2>&1 \
      | grep -E --line-buffered "startup|tok/s|greedy|Error|error" || true
  done
done
done
