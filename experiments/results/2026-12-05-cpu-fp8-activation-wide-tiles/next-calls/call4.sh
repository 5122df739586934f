# Fourth call, if device time is left (~9 min; carry as callNext.sh, with callNext4.sh): a prefill trace of the
# 30B bench (which kernels a ~16k-token prefill step spends its 265 ms in, beyond the experts: the sort by
# expert, the sum of pairs, the attention projections); the bf16-activation path's prefill at 128-pair tiles;
# the skinny experts' launch shapes on Triton's conversion
set -u
source .device/prep.sh
date -u
timeout 200 python3 -m nvllm.run +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=1 profile.enabled=true profile.torch_trace_steps=1 profile.torch_trace_start_step=2 hydra.run.dir=$OUT/b30-prefill > $OUT/b30-prefill.log 2>&1; grep -E "Throughput|Startup" $OUT/b30-prefill.log | cut -c1-250
T=$(find $OUT/b30-prefill -name "trace*.json" | head -1); [ -n "$T" ] && python3 -m experiments.studies.trace_kernels $T --top 30 > $OUT/b30-prefill-trace.txt 2>&1; head -40 $OUT/b30-prefill-trace.txt
find $OUT -name "*.json*" -size +15M -delete
date -u
timeout 150 python3 -m experiments.kernels.moe_tile_sweep --fp8 --move-bits --jobs 14 --tokens 2048,8192 --row-tile 128 > $OUT/sweep-fp8-prefill-128.log 2>&1; grep -E "best|band" $OUT/sweep-fp8-prefill-128.log | cut -c1-200
date -u
timeout 150 python3 -m experiments.kernels.moe_bench --fp8 --skinny > $OUT/moe-bench-skinny.log 2>&1; tail -25 $OUT/moe-bench-skinny.log
date -u
