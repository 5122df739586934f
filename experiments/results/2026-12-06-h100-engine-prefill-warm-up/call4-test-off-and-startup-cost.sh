# On an H200: the aim (the 30B bench, nvllm's Qwen3-8B beside it), then the start-up warm-up's GPU test.
# On any other GPU: the GPU test with the warm-up off (it must fail), then start-up's parts with the warm-up
# off and on (the 30B as the bench runs it; Triton's caches warm from the test).
set -u
source .device/prep.sh > /dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
B="+experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=3 model.fp8_activations=true"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 200 python3 -m nvllm.run $B hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup|Error" $OUT/b30.log | cut -c1-250
  date -u
  timeout 130 python3 -m nvllm.run +experiment=bench model=qwen3-8b workload.repeats=2 hydra.run.dir=$OUT/b8 > $OUT/b8.log 2>&1; grep -E "Warning|Repeat|Throughput|Startup" $OUT/b8.log | cut -c1-250
  date -u
  timeout 200 python3 -m pytest -q -m gpu tests/runner/test_prefill_warm_up_gpu.py -p no:cacheprovider > $OUT/warm-up-test.log 2>&1; grep -E "passed|failed|compiled after|Error" $OUT/warm-up-test.log | cut -c1-600
else
  cp tests/runner/test_prefill_warm_up_gpu.py /tmp/kept.py
  sed -i 's/max_model_len=4096, \*\*settings)/max_model_len=4096, compile__prefill_warm_up="off", **settings)/' tests/runner/test_prefill_warm_up_gpu.py
  grep -n "prefill_warm_up=" tests/runner/test_prefill_warm_up_gpu.py
  timeout 200 python3 -m pytest -q -m gpu tests/runner/test_prefill_warm_up_gpu.py -p no:cacheprovider > $OUT/warm-up-test-off.log 2>&1; grep -E "passed|failed|compiled after" $OUT/warm-up-test-off.log | cut -c1-400
  cp /tmp/kept.py tests/runner/test_prefill_warm_up_gpu.py
  date -u
  for mode in off on off on; do timeout 90 python3 .device/probe_startup_cost.py $mode 2>&1 | grep -E "start-up|Error"; done | tee $OUT/startup-cost.log
fi
date -u
find $OUT -name "wandb" -type d -prune -exec rm -rf {} +
find $OUT -name ".hydra" -type d -prune -exec rm -rf {} +
find $OUT -size +15M -delete
