source .device/prep.sh; python3 -m pytest -m gpu -q tests/ops/test_moe_routing_gpu.py tests/models/test_qwen3_moe_gpu.py
