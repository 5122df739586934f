# H200: the fp8 cache's aims beside nano-vllm (0.6B, 8B, 8B shared prefixes), then Qwen3-30B-A3B with fp8 activations and the fp8 cache
set -u
source .device/prep.sh
date -u
python3 .device/peer/make_checkpoint.py 0.6b /tmp/ck06 .device/peer/qtok >/dev/null
PYTHONPATH=$PYTHONPATH:$PWD/.device/peer/nano-vllm ENGINE=nanovllm MODEL=/tmp/ck06 timeout 70 python3 .device/peer/workloads.py bench > $OUT/nano06.log 2>&1; grep "tok/s" $OUT/nano06.log
date -u
timeout 95 python3 -m nvllm.run +experiment=bench cache.dtype=fp8 workload.repeats=3 hydra.run.dir=/tmp/b06 > $OUT/b06-fp8kv.log 2>&1; grep -E "tok/s" $OUT/b06-fp8kv.log | tail -1
date -u
timeout 95 python3 -m nvllm.run +experiment=bench model=qwen3-8b cache.dtype=fp8 workload.repeats=2 hydra.run.dir=/tmp/b8 > $OUT/b8-fp8kv.log 2>&1; grep -E "tok/s" $OUT/b8-fp8kv.log | tail -1
date -u
timeout 170 python3 -m nvllm.run -m +experiment=shared_prefix model=qwen3-8b workload.repeats=2 cache.dtype=auto,fp8 hydra.sweep.dir=/tmp/hs8 > $OUT/sp8-cache.log 2>&1; grep -E "tok/s" $OUT/sp8-cache.log | tail -2
date -u
timeout 150 python3 -m nvllm.run +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 workload.repeats=1 model.fp8_activations=true cache.dtype=fp8 hydra.run.dir=/tmp/b2 > $OUT/b30-fp8a-rule-fp8kv.log 2>&1; grep -E "tok/s" $OUT/b30-fp8a-rule-fp8kv.log | tail -1
date -u
