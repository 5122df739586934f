"""Custom ops (`nvllm::store_kvcache`, `nvllm::attention`, `nvllm::linear`) and the kernels behind them."""

from nvllm.ops.attention_ops import attention, store_kvcache
from nvllm.ops.linear_ops import linear

__all__ = ["attention", "store_kvcache", "linear"]
