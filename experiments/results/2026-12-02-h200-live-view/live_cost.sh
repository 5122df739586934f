# The bench with the live view off and on, beside nano-vllm, one checkpoint, one call
source .device/prep.sh
w=$(mktemp -d)
python3 .device/peer/make_checkpoint.py 0.6b $w/ckpt .device/peer/qtok >/dev/null
PYTHONPATH=$PWD/.device/fa2:$PWD/.device/peer/nano-vllm ENGINE=nanovllm MODEL=$w/ckpt timeout 90 python3 .device/peer/workloads.py bench 2>&1 | grep -E "startup|tok/s" | sed "s/^/[nanovllm] /"
for live in off on; do
  extra=""; [ $live = on ] && extra="profile.enabled=true profile.live=true"
  PYTHONPATH=$PWD/.device/fa2:$PWD timeout 100 python3 -m nvllm.run +experiment=bench model.path=$w/ckpt workload.repeats=1 \
    hydra.run.dir=$w/run-$live $extra 2>&1 | grep -E "Throughput|Startup|rror" | sed "s/^/[live $live] /"
done
ls $w/run-on | head -20
