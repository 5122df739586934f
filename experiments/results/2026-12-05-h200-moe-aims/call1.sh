# Probe: the grouped MoE kernels at decode batches (conversions, fp16 activations, ncu); GPU tests; 30B bench traced
set -u
source .device/prep.sh
date -u
timeout 150 python3 .device/probe_grouped.py > $OUT/probe-grouped.log 2>&1; cat $OUT/probe-grouped.log | tail -8
date -u
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis"
timeout 150 /usr/local/cuda/bin/ncu --clock-control none $S -k regex:_grouped_matmul_kernel python3 .device/probe_grouped.py ncu > $OUT/ncu-grouped.log 2>&1; grep -E "grouped_matmul_kernel|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|L2 Hit|Grid Size|No Eligible|Warp Cycles Per Issued|Theoretical Occ|Block Limit" $OUT/ncu-grouped.log | head -120
date -u
timeout 70 python3 -m pytest -m gpu -q -x tests/ops/test_moe_skinny.py tests/ops/test_linear_ops.py > $OUT/gpu-tests.log 2>&1; tail -1 $OUT/gpu-tests.log
date -u
timeout 230 python3 -m nvllm.run +experiment=bench model=qwen3-30b-a3b model.quantization=fp8 cache.dtype=fp8 workload.repeats=1 profile.torch_trace_steps=2 profile.torch_trace_start_step=60 hydra.run.dir=$OUT/b30 > $OUT/b30.log 2>&1; grep -E "Throughput|Startup|trace" $OUT/b30.log | cut -c1-250
T=$(find $OUT/b30 -name "*.json" | head -1); [ -n "$T" ] && python3 -m experiments.studies.trace_kernels $T --top 30 > $OUT/b30-trace.txt 2>&1; head -45 $OUT/b30-trace.txt
find $OUT/b30 -name "*.json*" -size +15M -delete
date -u
