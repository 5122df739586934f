# model families on the H200: GPU parity tests, then the bench (and single stream) of each family's 7-8B
# shape beside Qwen3-8B, nano-vllm's Qwen3-8B in the same call. PART=a|b|c picks the share of one call.
source .device/prep.sh
export PYTHONPATH=$PWD/.device/fa2:$PWD
nvllm_run() {  # experiment model tag
  timeout 240 python3 -m nvllm.run +experiment=$1 model=$2 ${REPEATS:+workload.repeats=$REPEATS} \
    wandb.mode=offline hydra.run.dir=/tmp/runs/$3 > /tmp/runs-$3.log 2>&1
  echo "== nvllm $1 $2 (rc $?)"; grep -E "tok/s|startup|Error|error" /tmp/runs-$3.log | tail -12
  cp /tmp/runs/$3/results.json $OUT/$3.json 2>/dev/null
}
nano() {  # workload
  w=/tmp/nano; [ -d $w/ckpt ] || python3 .device/peer/make_checkpoint.py 8b $w/ckpt .device/peer/qtok >/dev/null
  echo "== nano-vllm $1 qwen3-8b"
  PYTHONPATH=$PWD/.device/fa2:$PWD/.device/peer/nano-vllm ENGINE=nanovllm MODEL=$w/ckpt timeout 240 \
    python3 .device/peer/workloads.py $1 2>&1 | grep -E "startup|tok/s|Error|error"
}
mkdir -p /tmp/runs
case $PART in
  a) timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -x tests/models/test_families_gpu.py 2>&1 | tail -20
     nano bench; REPEATS=2 nvllm_run bench qwen3-8b bench-qwen3-8b;;
  b) timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/models/test_families_gpu.py 2>&1 | tail -20
     REPEATS=2 nvllm_run bench llama-3.1-8b bench-llama-3.1-8b; REPEATS=2 nvllm_run bench qwen2.5-7b bench-qwen2.5-7b;;
  c) nano single; for m in qwen3-8b llama-3.1-8b qwen2.5-7b; do nvllm_run latency $m single-$m; done;;
esac
