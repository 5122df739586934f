# Run `fp8-first-run`: main's GPU tests (first GPU run of FP8), FP8 accuracy/speed on the 8B, 0.6B bench phases.
source .device/setup.sh
mkdir -p $OUT/r /tmp/ck; export CKPT_DIR=/tmp/ck
cd .device/before; export PYTHONPATH=$PWD/../fa2:$PWD
( t "gpu tests"; timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_linear_ops.py tests/test_qk_norm_rope_store.py tests/test_attention_ops.py tests/test_gpu_cascade.py tests/test_norm_ops.py tests/test_pdl.py tests/test_request_api_gpu.py tests/test_fp8.py > $OUT/r/gpu-tests.txt 2>&1; t "tests done"; tail -40 $OUT/r/gpu-tests.txt ) &
( t "fp8 accuracy"; timeout 240 python3 -m experiments.fp8_accuracy --model qwen3-8b --prompts 16 --new 128 > $OUT/r/fp8-accuracy.txt 2>&1; t "acc done"; tail -30 $OUT/r/fp8-accuracy.txt ) &
wait
t "fp8 latency"; timeout 120 python3 -m nvllm.run +experiment=latency model=qwen3-8b model.quantization=fp8 hydra.run.dir=/tmp/r/f8l > $OUT/r/fp8-latency.log 2>&1; grep -E "tok/s|p50|Error" $OUT/r/fp8-latency.log | head -5
t "fp8 bench"; timeout 150 python3 -m nvllm.run +experiment=bench model=qwen3-8b model.quantization=fp8 workload.repeats=1 hydra.run.dir=/tmp/r/f8b > $OUT/r/fp8-bench.log 2>&1; grep -E "tok/s|Error" $OUT/r/fp8-bench.log | head -5
t "0.6b profile"; timeout 100 python3 -m nvllm.run +experiment=profile hydra.run.dir=/tmp/r/p06 > $OUT/r/p06.log 2>&1; cp /tmp/r/p06/profile.txt /tmp/r/p06/steps.csv $OUT/r/ 2>/dev/null; grep -A12 -i phase $OUT/r/profile.txt | head -14
t done
