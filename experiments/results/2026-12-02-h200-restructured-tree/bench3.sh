# nano-vllm, nvllm before the restructure (.device/before) and now, same checkpoint, same call
source .device/prep.sh
w=$(mktemp -d)
SIZE=${SIZE:-0.6b}
python3 .device/peer/make_checkpoint.py $SIZE $w/ckpt .device/peer/qtok >/dev/null
run() {  # engine workload tag
  case $1 in
    nanovllm) PP=$PWD/.device/fa2:$PWD/.device/peer/nano-vllm; E=nanovllm;;
    before) PP=$PWD/.device/fa2:$PWD/.device/before; E=nvllm;;
    now) PP=$PWD/.device/fa2:$PWD; E=nvllm;;
  esac
  PYTHONPATH=$PP ENGINE=$E MODEL=$w/ckpt timeout 300 python3 .device/peer/workloads.py $2 2>&1 \
    | grep -E --line-buffered "startup|tok/s|Error|error" | sed "s/^/[$1 $2 $3 $SIZE] /"
}
for wl in ${WORKLOADS:-bench single}; do for e in nanovllm before now; do run $e $wl r1; done; done
for wl in ${AGAIN:-bench}; do for e in now before nanovllm; do run $e $wl r2; done; done
