# fp8 weights against fp16 activations (the single stream's kernels); Qwen3-30B-A3B fp8 bench with fp8 activations off and on
set -u
source .device/prep.sh
date -u
timeout 230 python3 -m experiments.kernels.fp16_dots_bench > $OUT/fp16-dots.log 2>&1; tail -14 $OUT/fp16-dots.log | cut -c1-250
date -u
timeout 320 python3 -m nvllm.run -m +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=1 model.fp8_activations=false,true hydra.sweep.dir=$OUT/b30 > $OUT/b30-fp8a.log 2>&1; grep -E "#[01] :|Throughput" $OUT/b30-fp8a.log | cut -c1-250
date -u
